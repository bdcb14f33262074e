"""``lucerna bench``: its flags, the scenarios, and the two ad hoc ways to run it.

The named scenarios (``lucerna bench --list``; orchestrator/bench/scenario_cli.py) are
the reference: each starts both servers with the peer at its best, keeps cold and warm
phases apart, alternates and repeats, and refuses ratios across different cache use::

    lucerna bench decode --model default-chat [--out run.json]

Ad hoc, against running servers::

    lucerna bench --url http://127.0.0.1:8080/v1 [--compare URL2] [--set code,long-4k]
                  [--max-tokens N] [--repeats N] [--concurrency 1,8,64] [--out results.json]

Ad hoc, starting Lucerna and its comparison on the same GGUF and settings (no salts,
no phases: a prompt repeated across levels or repeats may be a cache hit on one side)::

    lucerna bench --model PATH --against llama-server [--n-ctx N] [--threads N] ...
    lucerna bench --model PATH --against daemon       (the HTTP front end's own cost)
    lucerna bench --model PATH --against llama-server --set agent [--no-cache]
    lucerna bench --model PATH --disk-restart         (Lucerna's disk tier, restarted)

Both servers run as their users run them: with their prompt caches on (Lucerna's prefix
cache, llama-server's ``cache_prompt`` and ``--cache-ram``), so a conversation (``--set
agent``) shows what each keeps between turns. ``--no-cache`` turns both off, so every
request prefills from its first token: the fair footing for single-request prefill
and decode figures (``code``, ``long-*``), as the figures before issue 12 were made.

The markdown tables go to stdout, progress to stderr, everything to ``--out``.
Only argparse and the flag declarations (orchestrator.settings) are imported here; the
benchmark's modules load when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.bench._args import int_list, progress
from orchestrator.errors import ConfigError
from orchestrator.settings import (
    BEARER_KEY,
    BEARER_KEY_ENV,
    N_CTX,
    N_GPU_LAYERS,
    PARALLEL,
    QUEUE_LIMIT,
    SPARE_SEQUENCES,
    THREADS,
    add_flag,
    check_flag,
)

if TYPE_CHECKING:
    from orchestrator.bench.client import Endpoint
    from orchestrator.bench.runner import BenchPlan, CaseRun
    from orchestrator.bench.servers import ServerSettings

__all__ = ["add_bench_parser", "cmd_bench", "server_settings"]

_AGAINST = ("llama-server", "daemon")


def _set_list(text: str) -> tuple[str, ...]:
    from orchestrator.bench.prompts import SET_NAMES

    names = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [n for n in names if n not in SET_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown prompt set(s) {', '.join(unknown) or text!r}; choose from "
            f"{', '.join(SET_NAMES)}")
    return names


def add_bench_parser(sub: Any) -> None:
    """Add the ``bench`` subcommand to ``lucerna``'s subparsers."""
    from orchestrator.bench.scenario_cli import add_scenario_arguments

    bench = sub.add_parser(
        "bench", help="benchmark scenarios of Lucerna against llama-server (--list), or an "
        "OpenAI-compatible endpoint", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scenario_arguments(bench)
    where = bench.add_argument_group("targets (give --url, or --model with --against)")
    where.add_argument("--url", help="base URL of the endpoint, up to /v1 (the candidate)")
    where.add_argument("--compare", metavar="URL2", help="a second endpoint (the baseline); "
                       "ratios are candidate / baseline")
    where.add_argument("--label", default="candidate", help="name of --url in the report")
    where.add_argument("--compare-label", default="baseline", help="name of --compare")
    where.add_argument("--pid", type=int, help="process id of --url's server (memory record)")
    where.add_argument("--compare-pid", type=int, help="process id of --compare's server")
    where.add_argument("--model-name", help="the `model` field of requests (default: none "
                       "with --url, the file's stem with --model)")
    add_flag(where, BEARER_KEY, default=os.environ.get(BEARER_KEY_ENV) or None,
             help="bearer key for --url and --compare")
    where.add_argument("--model", help="GGUF file ('default': the embedded gemma3-270m): "
                       "start `lucerna serve` on it and the --against target")
    where.add_argument("--against", choices=_AGAINST, help="llama-server: llama.cpp's own "
                       "server from the same pinned engine; daemon: our daemon driven directly")

    cases = bench.add_argument_group("cases")
    cases.add_argument("--set", dest="sets", type=_set_list, default=("code",),
                       help="prompt sets, comma-separated: code, long-4k, long-16k, long-32k, "
                       "long-64k, long-128k, agent (an 8-turn coding-agent conversation, "
                       "4K to 8K tokens, sent as chat; concurrency 1 only; each repeat is a "
                       "new conversation) (default: code)")
    cases.add_argument("--max-tokens", type=int, help="tokens per request (default 128; a "
                       "scenario: its own)")
    cases.add_argument("--repeats", type=int, help="times each prompt is run (default 1; a "
                       "scenario: 3)")
    cases.add_argument("--concurrency", type=int_list, default=(1,),
                       help="concurrent streams, comma-separated, e.g. 1,8,64 (default 1)")
    cases.add_argument("--limit", type=int, help="only the first N prompts of each set")
    cases.add_argument("--api", choices=("completions", "chat"), default="completions",
                       help="/v1/completions with the raw prompt (default: both servers see "
                       "the same tokens), or /v1/chat/completions")
    cases.add_argument("--no-warmup", action="store_true", help="skip the warm-up request")
    cases.add_argument("--probe-sequential", action="store_true",
                       help="sample /health and memory at concurrency 1 too")
    cases.add_argument("--out", type=Path, help="write the JSON result here")

    engine = bench.add_argument_group("self-contained settings (with --model; both servers "
                                      "get the same)")
    add_flag(engine, N_CTX, shown="what the largest set needs, within the model's training "
             "context")
    add_flag(engine, THREADS)
    add_flag(engine, N_GPU_LAYERS)
    add_flag(engine, PARALLEL, help="requests that generate at once: Lucerna's --parallel and "
             "llama-server's --parallel (slots); the context given or chosen is per request, "
             "and both servers hold it times this in one pool", shown="1")
    add_flag(engine, SPARE_SEQUENCES, help="Lucerna's --spare-sequences (llama-server has no "
             "such sequences)", shown="Lucerna's default")
    add_flag(engine, QUEUE_LIMIT, help="Lucerna's --queue-limit",
             shown=f"the largest concurrency, at least {QUEUE_LIMIT.default}")
    engine.add_argument("--startup-timeout", type=float, default=600.0,
                        help="seconds each server may take to become healthy")
    engine.add_argument("--no-cache", action="store_true",
                        help="prompt caches off on both servers (Lucerna --cache-ram 0; "
                        "llama-server --no-cache-prompt --cache-ram 0 and cache_prompt: false "
                        "per request); default: both on, as their users run them")
    engine.add_argument("--disk-restart", action="store_true",
                        help="also measure Lucerna's first agent turn after a restart with "
                        "--kv-cache-dir warm, against the same turn cold (runs after the "
                        "comparison; alone when --against is not given)")
    bench.set_defaults(func=cmd_bench)


def _plan(args: argparse.Namespace) -> BenchPlan:
    from orchestrator.bench.runner import BenchPlan

    return BenchPlan(sets=args.sets, max_tokens=args.max_tokens, repeats=args.repeats,
                     concurrency=args.concurrency, limit=args.limit, warmup=not args.no_warmup,
                     probe_sequential=args.probe_sequential)


async def _run(endpoints: list[Endpoint], plan: BenchPlan, api: str,
               direct: ServerSettings | None = None) -> list[CaseRun]:
    import httpx

    from orchestrator.bench.runner import Driver, HttpDriver, run_bench

    # A request queued behind 63 others gets its response headers only when its turn
    # comes: no read timeout short of a stuck server.
    timeout = httpx.Timeout(30.0, read=1800.0)
    limits = httpx.Limits(max_connections=max(plan.concurrency) + 8)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        drivers: list[Driver] = [HttpDriver(e, client, api) for e in endpoints]  # type: ignore[arg-type]
        if direct is None:
            return await run_bench(drivers, plan, progress)
        from daemons.native import ensure_native
        from orchestrator.bench.direct import open_daemon_driver

        async with open_daemon_driver(direct.model, ensure_native(progress=progress),
                                      n_ctx=direct.n_ctx, threads=direct.threads,
                                      n_gpu_layers=direct.n_gpu_layers) as daemon:
            return await run_bench([*drivers, daemon], plan, progress)


def _finish(args: argparse.Namespace, runs: list[CaseRun], targets: list[dict[str, Any]],
            settings: dict[str, Any], started: float,
            disk_restart: dict[str, Any] | None = None) -> int:
    from orchestrator.bench.report import bench_document, markdown_tables, write_json

    doc = bench_document(runs, targets=targets, settings=settings, started=started)
    if disk_restart is not None:
        doc["disk_restart"] = disk_restart
    if args.out:
        write_json(doc, args.out)
        progress(f"wrote {args.out}")
    sys.stdout.write(markdown_tables(doc))
    failed = sum(r.summary().failed for r in runs)
    if failed:
        progress(f"{failed} request(s) failed; see the JSON for their errors")
    return 0


def _loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def _settings(args: argparse.Namespace, plan: BenchPlan, **extra: Any) -> dict[str, Any]:
    return {"argv": sys.argv, "loadavg_at_start": _loadavg(), "api": args.api,
            "sets": list(plan.sets),
            "max_tokens": plan.max_tokens, "repeats": plan.repeats,
            "concurrency": list(plan.concurrency), "limit": plan.limit,
            "temperature": 0, **extra}


def _bench_urls(args: argparse.Namespace) -> int:
    import trio

    from orchestrator.bench.client import Endpoint

    plan = _plan(args)
    endpoints = [Endpoint(args.label, args.url, args.model_name, args.api_key, pid=args.pid)]
    if args.compare:
        endpoints.append(Endpoint(args.compare_label, args.compare, args.model_name,
                                  args.api_key, pid=args.compare_pid))
    settings = _settings(args, plan)
    started = time.time()
    runs = trio.run(_run, endpoints, plan, args.api)
    targets = [{"label": e.label, "url": e.base_url, "pid": e.pid} for e in endpoints]
    return _finish(args, runs, targets, settings, started)


def server_settings(args: argparse.Namespace, plan: BenchPlan, model: Path, n_ctx: int,
                    chat_template_file: Path | None = None) -> ServerSettings:
    """What both servers of a self-contained run are started with."""
    from orchestrator.bench.servers import ServerSettings

    return ServerSettings(
        model=model, n_ctx=n_ctx, threads=args.threads or os.cpu_count() or 1,
        n_gpu_layers=args.n_gpu_layers,
        queue_limit=args.queue_limit or max(QUEUE_LIMIT.default, *plan.concurrency),
        prompt_cache=not args.no_cache, chat_template_file=chat_template_file,
        parallel=args.parallel or 1, spare_sequences=args.spare_sequences)


def _bench_self_contained(args: argparse.Namespace) -> int:
    import tempfile

    import trio

    from daemons.default_model import ensure_default_model
    from daemons.gguf_info import read_gguf_info
    from daemons.native import ensure_native
    from orchestrator.bench.client import Endpoint
    from orchestrator.bench.prompts import prompt_set
    from orchestrator.bench.servers import (
        ServerProcess,
        free_port,
        llama_server_argv,
        llama_server_body,
        lucerna_argv,
    )
    from orchestrator.chat_template import FALLBACK_TEMPLATE

    plan = _plan(args)
    ensure_native(progress=progress)
    model = (ensure_default_model(progress) if args.model == "default"
             else Path(args.model).expanduser().resolve())
    sets = plan.sets if args.against else ("agent",)
    n_ctx = args.n_ctx or max(prompt_set(name).n_ctx for name in sets)
    info = read_gguf_info(model)
    trained = info.context_length
    if args.n_ctx is None and trained and n_ctx > trained:
        progress(f"n_ctx {n_ctx} is beyond the model's training context; using {trained} "
                 "(give --n-ctx to go beyond it)")
        n_ctx = trained
    name = args.model_name or model.stem
    logs = Path(tempfile.mkdtemp(prefix="lucerna-bench-"))
    template_file = None
    if info.chat_template is None:
        # Lucerna renders chats of a template-less model with its fallback; llama-server
        # would use ChatML. The same template on both sides: the same prompts.
        template_file = logs / "fallback-chat-template.jinja"
        template_file.write_text(FALLBACK_TEMPLATE, encoding="utf-8")
    # Each of the --parallel slots is promised the context a request needs (both servers
    # hold n_ctx per slot in one pool, ServerSettings.parallel).
    settings = server_settings(args, plan, model, n_ctx, template_file)
    recorded = _settings(
        args, plan, model=str(model), n_ctx=settings.n_ctx, parallel=settings.parallel,
        spare_sequences=settings.spare_sequences,
        threads=settings.threads,
        n_gpu_layers=settings.n_gpu_layers, queue_limit=settings.queue_limit,
        prompt_cache="on" if settings.prompt_cache else "off",
        chat_template=("lucerna fallback, both servers" if template_file else "the model's"))
    started = time.time()
    runs: list[CaseRun] = []
    servers: list[ServerProcess] = []
    if not args.against:
        return _finish(args, runs, [], recorded, started,
                       _disk_restart(args, settings, name, logs))
    try:
        lucerna_port = free_port()
        servers.append(ServerProcess("lucerna", lucerna_argv(settings, lucerna_port, name),
                                     lucerna_port, logs / "lucerna.log"))
        if args.against == "llama-server":
            from daemons.peer import ensure_llama_server

            binary = ensure_llama_server(progress=progress).server
            peer_port = free_port()
            servers.append(ServerProcess(
                "llama-server", llama_server_argv(binary, settings, peer_port, name),
                peer_port, logs / "llama-server.log"))
        for server in servers:
            progress(f"starting {server.label}: {' '.join(server.argv)} (log: {server.log_path})")
        for server in servers:
            server.wait_healthy(args.startup_timeout)
            progress(f"{server.label} is healthy on port {server.port}")
        endpoints = [
            Endpoint(s.label, s.base_url, name, pid=s.pid,
                     extra_body=llama_server_body(settings) if s.label == "llama-server"
                     else {})
            for s in servers
        ]
        started = time.time()
        runs = trio.run(_run, endpoints, plan, args.api,
                        settings if args.against == "daemon" else None)
    finally:
        for server in reversed(servers):
            code = server.stop()
            progress(f"stopped {server.label} (exit {code})")
    targets: list[dict[str, Any]] = [
        {"label": s.label, "url": s.base_url, "argv": s.argv} for s in servers]
    if args.against == "daemon":
        targets.append({"label": "daemon", "url": None, "argv": None})
    restart = _disk_restart(args, settings, name, logs) if args.disk_restart else None
    return _finish(args, runs, targets, recorded, started, restart)


def _disk_restart(args: argparse.Namespace, settings: ServerSettings, name: str,
                  logs: Path) -> dict[str, Any]:
    from orchestrator.bench.restart import measure_disk_restart

    return measure_disk_restart(settings, name, logs, max_tokens=args.max_tokens,
                                startup_timeout=args.startup_timeout, progress=progress)


def cmd_bench(args: argparse.Namespace) -> int:
    # One INFO line per request from httpx would drown the progress lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.list:
        from orchestrator.bench.scenario_cli import list_text

        sys.stdout.write(list_text())
        return 0
    if args.scenario:
        from orchestrator.bench.scenario_cli import cmd_scenario

        return cmd_scenario(args)
    args.max_tokens = 128 if args.max_tokens is None else args.max_tokens
    args.repeats = 1 if args.repeats is None else args.repeats
    if bool(args.url) == bool(args.model):
        raise SystemExit("lucerna bench: error: give either --url (a running endpoint) or "
                         "--model with --against (start the servers here)")
    if args.model and not args.against and not args.disk_restart:
        raise SystemExit("lucerna bench: error: --model needs --against llama-server or "
                         "--against daemon (or --disk-restart)")
    if args.url and (args.no_cache or args.disk_restart):
        raise SystemExit("lucerna bench: error: --no-cache and --disk-restart start their "
                         "own servers: give --model, not --url")
    if args.against == "daemon" and "agent" in args.sets:
        raise SystemExit("lucerna bench: error: the agent set is a chat; --against daemon "
                         "drives the daemon without a chat template")
    if args.max_tokens < 1 or args.repeats < 1 or (args.limit is not None and args.limit < 1):
        raise SystemExit("lucerna bench: error: --max-tokens, --repeats and --limit must be >= 1")
    if args.url and (args.parallel is not None or args.spare_sequences is not None):
        raise SystemExit("lucerna bench: error: --parallel and --spare-sequences start their "
                         "own servers: give --model, not --url")
    try:
        check_flag(PARALLEL, args.parallel)
        check_flag(SPARE_SEQUENCES, args.spare_sequences)
    except ConfigError as exc:
        raise SystemExit(f"lucerna bench: error: {exc}") from None
    if args.url:
        return _bench_urls(args)
    return _bench_self_contained(args)
