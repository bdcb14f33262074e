"""``lucerna niah``: single-needle retrieval over context lengths x depths x keep ratios.

::

    lucerna niah [--mode daemon] [--model PATH|default] [--drafter PATH|default]
                 [--lengths 2048,4096] [--depths 0.1,0.5,0.9] [--keeps 0.1,0.2,0.3,0.5]
                 [--filler-file FILE_OR_DIR] [--park] [--out niah.json] [--png niah.png]
    lucerna niah --mode http --url http://127.0.0.1:8080/v1 [--model-name NAME] ...

Every (length, depth) case is answered with the full prompt (the TTFT baseline, unless
``--no-baseline``) and then compressed at each keep ratio. The markdown table goes to
stdout, progress to stderr, everything to ``--out`` (JSON) and ``--png`` (a heatmap
per keep ratio). Exit status 0 only when the needle was found in every cell, 1
otherwise. Only argparse and the flag declarations (orchestrator.settings) are imported
here; the rest loads when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.settings import (
    BEARER_KEY,
    BEARER_KEY_ENV,
    N_CTX,
    N_GPU_LAYERS,
    THREADS,
    add_flag,
)

if TYPE_CHECKING:
    from orchestrator.niah._backends import Backend
    from orchestrator.niah._grid import Cell

__all__ = ["add_niah_parser", "cmd_niah"]


def progress(message: str) -> None:
    print(f"lucerna niah: {message}", file=sys.stderr, flush=True)


def _numbers(kind: type, low: float, high: float | None = None) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}s separated by commas, "
                                             f"got {text!r}") from None
        if not values or any(v < low or (high is not None and v > high) for v in values):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"expected values {bound}, got {text!r}")
        return values

    return parse


def add_niah_parser(sub: Any) -> None:
    niah = sub.add_parser(
        "niah", help="needle-in-a-haystack over context lengths x depths x PFlash keep ratios",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    niah.add_argument("--mode", choices=("daemon", "http"), default="daemon",
                      help="daemon: start a target and a pflash drafter daemon and drive them "
                      "over the protocol (default); http: ask a running Lucerna")
    niah.add_argument("--lengths", type=_numbers(int, 64), default=(2048, 4096),
                      help="context lengths in the target's tokens (default 2048,4096)")
    niah.add_argument("--depths", type=_numbers(float, 0.0, 1.0), default=(0.1, 0.5, 0.9),
                      help="needle depths, 0 = start of the filler, 1 = end (default "
                      "0.1,0.5,0.9)")
    niah.add_argument("--keeps", type=_numbers(float, 0.001, 1.0), default=(0.1, 0.2, 0.3, 0.5),
                      help="keep ratios to compress at (default 0.1,0.2,0.3,0.5)")
    niah.add_argument("--no-baseline", dest="baseline", action="store_false",
                      help="skip the full-prompt answers (they are the TTFT baseline)")
    niah.add_argument("--filler-file", type=Path,
                      help="filler from a text file, or every text file under a directory "
                      "(e.g. source code); default: deterministic synthetic prose")
    niah.add_argument("--max-tokens", type=int, default=24,
                      help="tokens generated per answer (default 24)")
    niah.add_argument("--seed", default="lucerna-niah",
                      help="seed of the filler and the needles (default lucerna-niah)")
    niah.add_argument("--out", type=Path, default=Path("niah.json"),
                      help="JSON results (default niah.json)")
    niah.add_argument("--png", type=Path, help="heatmap (default: --out with .png)")
    daemon = niah.add_argument_group("daemon mode")
    daemon.add_argument("--model", default="default",
                        help="target GGUF, or 'default' (the embedded gemma3-270m)")
    daemon.add_argument("--drafter", default="default",
                        help="drafter GGUF (qwen3, qwen35, gemma3 or llama), or 'default'")
    add_flag(daemon, N_CTX, help="context of both daemons",
             shown="the longest length plus --max-tokens plus 64")
    add_flag(daemon, THREADS)
    add_flag(daemon, N_GPU_LAYERS)
    daemon.add_argument("--park", action="store_true",
                        help="park the target while the drafter scores (shared device)")
    # The [models.prefill] keys of the same names; `lucerna` has loaded prefill already.
    from orchestrator.prefill._keys import PrefillKeys

    add_flag(daemon, PrefillKeys.LOOKAHEAD, flag="--lookahead", help="compress lookahead")
    add_flag(daemon, PrefillKeys.CHUNK, flag="--chunk", help="compress chunk")
    add_flag(daemon, PrefillKeys.POOL, flag="--pool", help="compress pool")
    add_flag(daemon, PrefillKeys.SEGMENT, flag="--segment",
             help="compress segment (0: score in one pass)")
    http = niah.add_argument_group("http mode")
    http.add_argument("--url", default="http://127.0.0.1:8080/v1",
                      help="the server's base URL (default http://127.0.0.1:8080/v1); it needs "
                      "prefill compression on (a drafter), e.g. --prefill-compression auto")
    add_flag(http, BEARER_KEY, default=os.environ.get(BEARER_KEY_ENV) or None)
    http.add_argument("--model-name", help="the model field (default: the server's only one)")
    niah.set_defaults(func=cmd_niah)


def cmd_niah(args: argparse.Namespace) -> int:
    import trio

    from orchestrator.niah._haystack import corpus_filler, synthetic_filler
    from orchestrator.niah._report import render_table, write_heatmap, write_json

    try:
        filler = (corpus_filler(args.filler_file) if args.filler_file
                  else synthetic_filler(args.seed))
    except ValueError as exc:
        progress(f"error: {exc}")
        return 2
    load_before = os.getloadavg()
    started = time.time()
    cells, description = trio.run(_run, args, filler)
    png = args.png or args.out.with_suffix(".png")
    run = {
        "command": " ".join(["lucerna", *sys.argv[1:]]) if sys.argv else "lucerna niah",
        "mode": args.mode, "backend": description, "filler": filler.name,
        "lengths": list(args.lengths), "depths": list(args.depths), "keeps": list(args.keeps),
        "baseline": args.baseline, "max_tokens": args.max_tokens, "seed": args.seed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_s": round(time.time() - started, 1), "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    print(render_table(cells))
    write_json(args.out, cells, run)
    write_heatmap(png, cells, f"NIAH, {filler.name} filler\n{description}")
    passed = sum(c.passed for c in cells)
    progress(f"{passed}/{len(cells)} cells passed; wrote {args.out} and {png}")
    return 0 if cells and passed == len(cells) else 1


async def _run(args: argparse.Namespace, filler: Any) -> tuple[list[Cell], str]:
    from orchestrator.niah._grid import run_grid

    async def grid(backend: Backend) -> list[Cell]:
        progress(f"{backend.description}; filler {filler.name}")
        return await run_grid(backend, filler, args.lengths, args.depths, args.keeps,
                              baseline=args.baseline, max_tokens=args.max_tokens,
                              seed=args.seed, progress=progress)

    if args.mode == "http":
        import httpx

        from orchestrator.niah._backends import HttpBackend

        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(900.0)) as client:
            backend: Backend = HttpBackend(client, args.url, args.model_name)
            return await grid(backend), backend.description

    from daemons.native import ensure_native
    from orchestrator.niah._backends import open_daemon_backend

    native = ensure_native(progress=progress)
    target, drafter, options = _launches(args, native)
    async with open_daemon_backend(target, drafter, options, park=args.park) as daemons:
        return await grid(daemons), daemons.description


def _launches(args: argparse.Namespace, native: Any) -> tuple[Any, Any, Any]:
    from dataclasses import replace

    from daemons.default_model import ensure_default_model
    from daemons.gguf_info import read_gguf_info
    from daemons.roles import DaemonLaunch, role_named, target_role_for
    from orchestrator.prefill import CompressOptions

    def path(setting: str) -> Path:
        return ensure_default_model(progress) if setting == "default" else Path(setting)

    n_ctx = args.n_ctx or max(args.lengths) + args.max_tokens + 64
    target_path, drafter_path = path(args.model), path(args.drafter)
    role = target_role_for(read_gguf_info(target_path).architecture)
    common = {"n_ctx": n_ctx, "threads": args.threads, "n_gpu_layers": args.n_gpu_layers}
    target = DaemonLaunch(role=role, executable=native.binary(role.name), model=target_path,
                          **common)
    drafter = DaemonLaunch(role=role_named("pflash"), executable=native.binary("pflash"),
                           model=drafter_path, **common)
    defaults = CompressOptions()
    options = replace(defaults, lookahead=args.lookahead or defaults.lookahead,
                      chunk=args.chunk or defaults.chunk, pool=args.pool or defaults.pool,
                      segment=defaults.segment if args.segment is None else args.segment)
    return target, drafter, options
