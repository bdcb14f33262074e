"""``lucerna bench <scenario>`` and ``lucerna bench --list``: the scenario command's flags.

::

    lucerna bench --list
    lucerna bench decode --model default-chat [--repeats 3] [--out run.json]
    lucerna bench streams --model M.gguf --levels 1,4,8,16 [--peer both]
    lucerna bench agent --model M.gguf
    lucerna bench edit --model M.gguf [--ngram-types all]
    lucerna bench long-context --model M.gguf [--scale 0.03125] [--drafter default]
    lucerna bench speculative --model TARGET.gguf --draft DRAFT.gguf [--acceptance 1,4,8]

Each run starts its own servers on the GGUF: ours (``lucerna serve``) and the peer
(llama-server from the pristine pinned tree; ``--peer patched`` or ``both`` for the one
built from our patched tree), with the flags the scenario declares (``--list`` shows
them and why). Markdown tables go to stdout, progress to stderr, the whole result to
``--out`` as one compact JSON document (orchestrator/bench/record.py).

Only argparse is imported here; the benchmark's modules load when it runs.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.bench._args import int_list

if TYPE_CHECKING:
    from daemons.peer import PeerVariant
    from orchestrator.bench.scenarios import Options, Scenario

__all__ = ["add_scenario_arguments", "cmd_scenario", "list_text"]

_PEERS: dict[str, tuple[PeerVariant, ...]] = {
    "pristine": ("pristine",), "patched": ("patched",), "both": ("pristine", "patched")}


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}"
                                         ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected acceptance lengths >= 1, got {text!r}")
    return values


def _words(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_scenario_arguments(bench: argparse.ArgumentParser) -> None:
    """The positional scenario, ``--list``, and the flags only scenarios take."""
    bench.add_argument("scenario", nargs="?", help="a named scenario (decode, streams, agent, "
                       "edit, long-context, speculative): `lucerna bench --list` says what "
                       "each measures; without one, the ad hoc modes below (--url, --model "
                       "with --against)")
    bench.add_argument("--list", action="store_true", help="list the scenarios, what each "
                       "measures, and each arm's flags and why")
    group = bench.add_argument_group("scenarios (with a scenario name)")
    group.add_argument("--peer", choices=tuple(_PEERS), default="pristine",
                       help="the peer llama-server: built from the pristine pinned tree "
                       "(default: as a user installs it), from our patched tree (our "
                       "kernels: separates kernel gains from design gains), or both")
    group.add_argument("--arms", type=_words, help="only these arms (their --list labels, "
                       "comma-separated), or 'all' (the optional ones too)")
    group.add_argument("--seed", type=int, default=0, help="seed of the prompts' salts")
    group.add_argument("--logs", type=Path, help="where the servers' logs go (default: a new "
                       "directory under the system's temporary one)")
    group.add_argument("--prompts", type=int, help="distinct prompts per repeat (agent: "
                       "turns per conversation)")
    group.add_argument("--levels", type=int_list, help="streams: concurrency levels, "
                       "e.g. 1,4,8,16")
    group.add_argument("--scale", type=float, default=1.0, help="workload size: "
                       "long-context tokens and edit-file lines times this (CPU: 0.03125)")
    group.add_argument("--draft", type=Path, help="speculative: the DFlash draft GGUF, "
                       "given to both servers")
    group.add_argument("--drafter", help="long-context: the PFlash drafter GGUF, or "
                       "'default' (the embedded gemma3-270m)")
    group.add_argument("--acceptance", dest="acceptances", type=_floats,
                       help="speculative: the fixed acceptance lengths (default 1,4,8,12)")
    group.add_argument("--ngram-types", type=_words, help="edit: the peer's n-gram types "
                       "to run (default ngram-mod, its best; 'all': every one)")


def list_text() -> str:
    """What ``--list`` prints: per scenario, what it measures and its arms' flags."""
    from orchestrator.bench.scenarios import SCENARIOS, Options
    from orchestrator.bench.servers import ServerSettings, llama_server_argv, lucerna_argv

    placeholder = Options(model=Path("<model.gguf>"))
    shared = ServerSettings(model=Path("<model.gguf>"), n_ctx=4096, threads=8, parallel=4)
    ours = lucerna_argv(shared, 8080, "bench")
    peer = llama_server_argv(Path("llama-server"), shared, 8081, "bench")
    parts = [textwrap.fill(
        "Every arm runs on the same GGUF with the same shared settings; for example, "
        "with --n-ctx 4096, --threads 8 and --parallel 4 (the scenario sets --parallel "
        f"and --n-ctx): ours `lucerna serve {' '.join(ours[4:])}`; the peer "
        f"`llama-server {' '.join(peer[1:])}`. Prompt caches stay on, as their users run "
        "them. An arm's own flags come after these.", 88)]
    for scenario in SCENARIOS:
        lines = [f"{scenario.name} (v{scenario.version}): {scenario.measures}",
                 f"  workload: {scenario.workload}",
                 f"  phases: {', '.join(p.name for p in scenario.phases(placeholder))}; "
                 f"levels: {', '.join(map(str, scenario.levels))}; needs {scenario.needs}"]
        for arm in scenario.arms(placeholder):
            flags = " ".join(arm.flags)
            if arm.oracle_accept is not None:
                flags += (" --draft <draft.gguf> --draft-oracle <transcripts> "
                          f"--oracle-accept {arm.oracle_accept:g}")
            flags = flags.strip() or "(shared settings only)"
            where = {"lucerna": "lucerna serve", "peer": "llama-server",
                     "daemon": "our daemon"}[arm.side]
            optional = " [optional]" if arm.optional else ""
            lines.append(f"  {arm.label}{optional}: {where} {flags}")
            lines += textwrap.wrap(arm.why, 88, initial_indent="      why: ",
                                   subsequent_indent="      ")
        lines += [f"  note: {note}" for note in scenario.notes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _model(text: str) -> Path:
    from daemons.default_model import ensure_chat_model, ensure_default_model
    from orchestrator.bench._args import progress

    if text == "default":
        return ensure_default_model(progress)
    if text == "default-chat":
        return ensure_chat_model(progress)
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise SystemExit(f"lucerna bench: error: --model: {path} is not a file")
    return path


def _options(args: argparse.Namespace, scenario: Scenario) -> Options:
    from orchestrator.bench.scenarios import Options
    from orchestrator.bench.scenarios.edit import NGRAM_TYPES

    ngram = args.ngram_types
    if ngram and "all" in ngram:
        ngram = NGRAM_TYPES
    elif ngram and (unknown := [t for t in ngram if t not in NGRAM_TYPES]):
        raise SystemExit(f"lucerna bench: error: --ngram-types: unknown {', '.join(unknown)}; "
                         f"choose from {', '.join(NGRAM_TYPES)} or all")
    if scenario.name == "speculative" and args.draft is None:
        raise SystemExit("lucerna bench: error: speculative needs --draft (the DFlash draft "
                         "GGUF both servers load)")
    for name in ("max_tokens", "repeats", "prompts"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit(f"lucerna bench: error: --{name.replace('_', '-')} must be >= 1")
    if args.scale <= 0:
        raise SystemExit("lucerna bench: error: --scale must be above 0")
    return Options(model=_model(args.model or "default"),
                   draft=args.draft.expanduser().resolve() if args.draft else None,
                   drafter=args.drafter, max_tokens=args.max_tokens,
                   repeats=args.repeats or 3, prompts=args.prompts, levels=args.levels,
                   scale=args.scale, acceptances=args.acceptances, ngram_types=ngram)


def cmd_scenario(args: argparse.Namespace) -> int:
    import os

    from daemons.errors import DaemonsError
    from orchestrator.bench._args import progress
    from orchestrator.bench.record import write_document
    from orchestrator.bench.scenario_report import scenario_markdown
    from orchestrator.bench.scenario_run import RunSettings, run_scenario
    from orchestrator.bench.scenarios import scenario_named
    from orchestrator.errors import OrchestratorError

    try:
        scenario = scenario_named(args.scenario)
    except ValueError as exc:
        raise SystemExit(f"lucerna bench: error: {exc}") from None
    for flag, given in (("--url", args.url), ("--compare", args.compare),
                        ("--against", args.against), ("--no-cache", args.no_cache),
                        ("--disk-restart", args.disk_restart)):
        if given:
            raise SystemExit(f"lucerna bench: error: {flag} is for the ad hoc modes; a "
                             "scenario starts its own servers with its own cache settings")
    options = _options(args, scenario)
    run = RunSettings(scenario=scenario, options=options, peers=_PEERS[args.peer],
                      arms=args.arms, seed=args.seed,
                      threads=args.threads or os.cpu_count() or 1,
                      n_gpu_layers=args.n_gpu_layers, n_ctx=args.n_ctx,
                      parallel=args.parallel, model_name=args.model_name or "bench",
                      startup_timeout=args.startup_timeout, argv=tuple(sys.argv),
                      logs=args.logs)
    try:
        doc = run_scenario(run, progress)
    except (ValueError, OrchestratorError, DaemonsError) as exc:
        # A server that would not start, a peer that would not build: say which, and why.
        raise SystemExit(f"lucerna bench: error: {exc}") from None
    if args.out:
        write_document(doc, args.out)
        progress(f"wrote {args.out} (run {doc['run_id']})")
    sys.stdout.write(scenario_markdown(doc))
    broken = doc["summary"]["cold_violations"]
    failed = sum(1 for r in doc["requests"] if not r["ok"])
    if failed:
        progress(f"{failed} request(s) failed; see --out for their errors")
    return 1 if broken or failed else 0
