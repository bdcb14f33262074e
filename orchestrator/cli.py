"""The ``lucerna`` command line.

    lucerna serve     set everything up, then serve the default (or a given) model
    lucerna test      set everything up, then run ruff, mypy and the test suite
    lucerna setup     build the engine and daemons, fetch the default model
    lucerna models    write the small random-weight test models; print their paths
    lucerna daemon    run one daemon in the foreground (its stdin protocol is yours)
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from daemons.default_model import DEFAULT_MODEL_NAME, ensure_default_model
from daemons.errors import DaemonsError
from daemons.gguf_info import read_gguf_info
from daemons.native import NativeBuild, ensure_native
from daemons.paths import repo_root
from daemons.roles import ROLES, DaemonLaunch, role_named, target_role_for
from orchestrator.errors import OrchestratorError
from orchestrator.models import ServedModel
from orchestrator.server import ServerOptions, run_server
from orchestrator.supervisor import RestartPolicy

__all__ = ["main"]


def progress(message: str) -> None:
    print(f"lucerna: {message}", file=sys.stderr, flush=True)


def _native() -> NativeBuild:
    return ensure_native(progress=progress)


def cmd_setup(args: argparse.Namespace) -> int:
    _native()
    ensure_default_model(progress)
    progress("setup complete")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from daemons.testmodels import ensure_test_models

    _native()
    print(f"default\t{ensure_default_model(progress)}")
    for name, path in ensure_test_models(progress=progress).items():
        print(f"{name}\t{path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    native = _native()
    model_path = Path(args.model).expanduser() if args.model else ensure_default_model(progress)
    info = read_gguf_info(model_path)
    role = target_role_for(info.architecture)
    name = args.model_name or (DEFAULT_MODEL_NAME if not args.model else model_path.stem)
    launch = DaemonLaunch(role=role, executable=native.binary(role.name), model=model_path,
                          n_ctx=args.n_ctx, threads=args.threads,
                          n_gpu_layers=args.n_gpu_layers)
    model = ServedModel(
        name=name, info=info, launch=launch, queue_limit=args.queue_limit,
        restart_policy=RestartPolicy(max_failures=args.restart_max_failures),
    )
    options = ServerOptions(host=args.host, port=args.port,
                            shutdown_timeout=args.shutdown_timeout)
    progress(f"serving {name} ({info.architecture}, {model_path}) on "
             f"http://{args.host}:{args.port}/v1")
    trio.run(run_server, [model], options)
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    from daemons.testmodels import ensure_test_models

    _native()
    ensure_default_model(progress)
    ensure_test_models(progress=progress)
    root = repo_root()
    python = sys.executable
    steps: list[tuple[str, list[str]]] = [
        ("ruff", [python, "-m", "ruff", "check", "."]),
        ("mypy", [python, "-m", "mypy"]),
        ("pytest", [python, "-m", "pytest", *args.extra]),
    ]
    for name, command in steps:
        progress(f"running {name}: {' '.join(command[2:])}")
        code = subprocess.call(command, cwd=root)
        if code != 0:
            progress(f"{name} failed (exit {code})")
            return code
    progress("all checks passed")
    return 0


def cmd_daemon(args: argparse.Namespace) -> int:
    native = _native()
    role = role_named(args.role)
    binary = native.binary(role.name)
    argv = [str(binary), args.model, *args.extra]
    os.execv(binary, argv)
    return 127  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lucerna", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-level", default=os.environ.get("LUCERNA_LOG_LEVEL", "INFO"),
                        help="logging level (default INFO; DEBUG shows daemon stderr)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a model over the OpenAI-compatible HTTP API")
    serve.add_argument("--model", help="GGUF file to serve (default: the embedded gemma3-270m)")
    serve.add_argument("--model-name", help="name clients use in the `model` field")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens")
    serve.add_argument("--threads", type=int, help="CPU threads for the daemon")
    serve.add_argument("--n-gpu-layers", type=int, help="layers to offload (GPU builds)")
    serve.add_argument("--shutdown-timeout", type=float, default=30.0,
                       help="seconds to drain in-flight requests on SIGTERM")
    serve.add_argument("--queue-limit", type=int, default=16,
                       help="requests that may wait per model before new ones get 503")
    serve.add_argument("--restart-max-failures", type=int, default=5,
                       help="consecutive daemon failures after which the server exits non-zero")
    serve.set_defaults(func=cmd_serve)

    test = sub.add_parser("test", help="set up, then run ruff, mypy and pytest")
    test.set_defaults(func=cmd_test, passthrough="pytest")

    setup = sub.add_parser("setup", help="build the engine and daemons, fetch the default model")
    setup.set_defaults(func=cmd_setup)

    models = sub.add_parser("models", help="write the random-weight test models")
    models.set_defaults(func=cmd_models)

    daemon = sub.add_parser("daemon", help="run one daemon in the foreground")
    daemon.add_argument("role", choices=sorted(ROLES))
    daemon.add_argument("model", help="GGUF file")
    daemon.set_defaults(func=cmd_daemon, passthrough="daemon")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # `test` hands unknown arguments to pytest and `daemon` to the daemon, so that
    # `lucerna test -k chat -x` and `lucerna daemon qwen35 m.gguf --n-ctx=2048` work.
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "passthrough", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args))
    except (DaemonsError, OrchestratorError) as exc:
        progress(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
