"""The ``lucerna`` command line.

    lucerna serve     set everything up, then serve the default model, a given one, or
                      the models of a TOML config (--config; configs/lucerna.toml)
    lucerna test      set everything up, then run ruff, mypy and the test suite
    lucerna setup     build the engine and daemons, fetch the two embedded models
    lucerna models    write the small random-weight test models; print their paths
    lucerna daemon    run one daemon in the foreground (its stdin protocol is yours;
                      stream values are shown on stderr as `S: ... -1` lines)
    lucerna bench     benchmark an endpoint, or Lucerna against llama-server on one GGUF
    lucerna niah      needle-in-a-haystack over context lengths x depths x PFlash keep ratios
    lucerna clients   print the line that points Codex, Claude Code or OpenCode at a running
                      Lucerna; `lucerna clients install` installs the pinned agents (npm)
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import trio

from daemons.default_model import ensure_chat_model, ensure_default_model
from daemons.errors import DaemonsError
from daemons.native import NativeBuild, ensure_native
from daemons.paths import repo_root
from daemons.roles import ROLES, role_named
from orchestrator.bench.cli import add_bench_parser
from orchestrator.clients import CLIENTS, ensure_client
from orchestrator.clients.cli import add_clients_parser
from orchestrator.config import (
    Overrides,
    ServerKeys,
    add_serve_arguments,
    apply_overrides,
    build_models,
    load_config,
    read_api_key_file,
)
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.niah.cli import add_niah_parser
from orchestrator.prefill import add_prefill_arguments, prefill_overrides
from orchestrator.server import run_server
from orchestrator.systemd import SystemdEnvironment
from protocol import STREAM_END, decode_token_bytes

__all__ = ["main"]


def progress(message: str) -> None:
    print(f"lucerna: {message}", file=sys.stderr, flush=True)


def _native() -> NativeBuild:
    return ensure_native(progress=progress)


def cmd_setup(args: argparse.Namespace) -> int:
    _native()
    ensure_default_model(progress)
    ensure_chat_model(progress)
    if args.config is not None:
        from orchestrator.config._hosts import host_setup_argv

        for host in load_config(args.config).hosts:
            argv = host_setup_argv(host)
            progress(f"setting up host {host.name} ({host.backend}): {' '.join(argv)}")
            code = subprocess.call(argv)
            if code != 0:
                progress(f"setup of host {host.name} failed (exit {code})")
                return code
    progress("setup complete")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from daemons.testmodels import ensure_test_models

    _native()
    print(f"default\t{ensure_default_model(progress)}")
    print(f"default-chat\t{ensure_chat_model(progress)}")
    for name, path in ensure_test_models(progress=progress).items():
        print(f"{name}\t{path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    flags = Overrides.from_args(args, api_keys=_api_keys_from_flags(args),
                                prefill=prefill_overrides(args))
    config = apply_overrides(load_config(args.config) if args.config else None, flags)
    server = config.server
    if server.log_level and not args.log_level_given:
        logging.getLogger().setLevel(server.log_level)
    models = build_models(config, _native(), progress)
    # Taken (and removed from our environment) before any daemon is spawned.
    systemd = SystemdEnvironment.take()
    for model in models:
        progress(f"serving {model.name} ({model.info.architecture}, {model.launch.model})")
        if model.prefill is not None:
            progress(f"  {model.name}: {model.prefill.describe()}")
        if model.prefix_cache is not None:
            progress(f"  {model.name}: {model.prefix_cache.describe()}")
    if systemd.listen_fds:
        progress(f"on the {len(systemd.listen_fds)} socket(s) systemd passed (fd "
                 f"{', '.join(map(str, systemd.listen_fds))})")
    else:
        progress(f"on http://{server.host}:{server.port}/v1")
        if not server.api_keys and not _is_loopback(server.host):
            progress(f"warning: listening on {server.host} without an API key; anyone who "
                     "can reach this port can use the models (set api_key_file or "
                     "LUCERNA_API_KEY)")
    trio.run(functools.partial(run_server, models, server, systemd=systemd))
    return 0


def _api_keys_from_flags(args: argparse.Namespace) -> tuple[str, ...] | None:
    """Keys from --api-key-file or $LUCERNA_API_KEY (which the daemons must not inherit)."""
    env_key = os.environ.pop("LUCERNA_API_KEY", "").strip()
    if args.api_key_file:
        return read_api_key_file(
            Path(args.api_key_file).expanduser(),
            lambda problem, fix: ConfigError(f"{ServerKeys.API_KEY_FILE.flag}: {problem}. "
                                             f"Fix: {fix}."))
    return (env_key,) if env_key else None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def cmd_test(args: argparse.Namespace) -> int:
    from daemons.peer import ensure_llama_server
    from daemons.testmodels import ensure_test_models

    _native()
    ensure_default_model(progress)
    ensure_chat_model(progress)
    ensure_test_models(progress=progress)
    # The benchmark scenarios' smoke run (tests/orchestrator/test_bench_smoke.py) compares
    # against llama-server from the pristine pinned tree: minutes to build, once.
    ensure_llama_server(progress=progress)
    _ensure_sshd()
    if "--no-clients" not in args.extra:  # tests/clients run the real agents (CI: always)
        for spec in CLIENTS:
            ensure_client(spec, progress)
    root = repo_root()
    python = sys.executable
    tier = ["--full", "--record-durations", str(root / "tests" / "durations.json")
            ] if args.full else []
    pytest = ["coverage", "run", "-m", "pytest"] if args.coverage else ["pytest"]
    steps: list[tuple[str, list[str]]] = [
        ("ruff", [python, "-m", "ruff", "check", "."]),
        ("mypy", [python, "-m", "mypy"]),
        ("pytest", [python, "-m", *pytest, *tier, *args.extra]),
    ]
    if args.coverage:
        shutil.rmtree(root / "build" / "coverage", ignore_errors=True)
        (root / "build" / "coverage").mkdir(parents=True)
        steps += [("coverage", [python, "-m", "coverage", "combine", "--quiet"]),
                  ("coverage", [python, "-m", "coverage", "report", "--sort=cover"])]
    for name, command in steps:
        progress(f"running {name}: {' '.join(command[2:])}")
        code = subprocess.call(command, cwd=root)
        if code != 0:
            progress(f"{name} failed (exit {code})")
            return code
    progress("all checks passed")
    return 0


_SSHD = "/usr/sbin/sshd"


def _ensure_sshd() -> None:
    """openssh-server for the multi-host tests (tests/_netns.py), where we may install it.

    They run a real sshd in a network namespace: the remote launcher a user would have.
    Installed only as root on a system with apt-get (CI's Debian image); elsewhere those
    tests skip, saying why (and fail under CI).
    """
    if Path(_SSHD).exists() or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    progress("installing openssh-server for the multi-host tests (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "openssh-server",
               "openssh-client"]
    if subprocess.call(install, env=env, stdout=subprocess.DEVNULL) != 0:
        # A fresh image may hold no package lists yet.
        subprocess.call(["apt-get", "update"], env=env, stdout=subprocess.DEVNULL)
        if subprocess.call(install, env=env, stdout=subprocess.DEVNULL) != 0:
            progress("could not install openssh-server; the multi-host tests will say so")


def cmd_daemon(args: argparse.Namespace) -> int:
    native = _native()
    role = role_named(args.role)
    binary = native.binary(role.name)
    argv = [str(binary), args.model, *args.extra]
    if any(arg in ("--stream-fd", "--channel") or arg.startswith(("--stream-fd=", "--channel="))
           for arg in args.extra):
        os.execv(binary, argv)  # the caller brought its own stream fd, or wants one channel
    return run_showing_stream(argv)


def run_showing_stream(argv: Sequence[str]) -> int:
    """Run a daemon on this terminal, its stream fd shown on stderr as ``S: ... -1`` lines.

    stdin, stdout and stderr are the daemon's own (inherited, not copied), so commands
    and replies pass straight through; only the binary stream fd needs a reader.
    """
    read_fd, write_fd = os.pipe()
    try:
        process = subprocess.Popen([*argv, f"--stream-fd={write_fd}"], pass_fds=(write_fd,))
    finally:
        os.close(write_fd)  # the daemon holds the only write end: its exit is EOF here
    try:
        echo_stream(read_fd, sys.stderr)
    except KeyboardInterrupt:
        # The terminal sent SIGINT to the daemon too; it ends its command and exits 0.
        pass
    finally:
        os.close(read_fd)
    return process.wait()


def echo_stream(fd: int, out: TextIO) -> None:
    """Write the int32 values arriving on ``fd`` to ``out`` until EOF, as they arrive.

    Each stream command's values make one line, ``S: 2 9259 1902 -1`` (the notation of
    PROTOCOL.md section 8), flushed after every read so a generation shows token by token.
    """
    pending = b""
    line_open = False
    while chunk := os.read(fd, 65536):
        pending += chunk
        whole = len(pending) - len(pending) % 4
        values, pending = decode_token_bytes(pending[:whole]), pending[whole:]
        for value in values:
            out.write(f" {value}" if line_open else f"S: {value}")
            line_open = value != STREAM_END
            if not line_open:
                out.write("\n")
        out.flush()
    if line_open:
        out.write("\n")
        out.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lucerna", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-level", default=os.environ.get("LUCERNA_LOG_LEVEL") or None,
                        help="logging level (default: $LUCERNA_LOG_LEVEL, the config's "
                        "log_level, or INFO; DEBUG shows daemon stderr)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a model over the OpenAI-compatible HTTP API")
    # Every default is None: a flag that was not given leaves the config file's value
    # (or the declared default) alone; see config.apply_overrides for the rules.
    serve.add_argument("--config", default=os.environ.get("LUCERNA_CONFIG") or None,
                       help="TOML config file (default: $LUCERNA_CONFIG; example: "
                       "configs/lucerna.toml); the flags below override it")
    add_serve_arguments(serve)
    add_prefill_arguments(serve)
    serve.set_defaults(func=cmd_serve)

    test = sub.add_parser("test", help="set up, then run ruff, mypy and pytest (the fast tier; "
                          "--full: every test at full depth, as CI runs it)")
    test.add_argument("--full", action="store_true",
                      help="the full tier (tests/_tiers.py): every matrix entry, full-depth "
                      "fuzz, kills and soaks; records tests/durations.json")
    test.add_argument("--coverage", action="store_true",
                      help="measure line coverage of orchestrator/, daemons/ and protocol/ "
                      "(subprocesses included) and print the report")
    test.set_defaults(func=cmd_test, passthrough="pytest")

    setup = sub.add_parser("setup", help="build the engine and daemons, fetch the embedded models")
    setup.add_argument("--config", help="also set up every [[hosts]] entry of this config "
                       "file, through its launcher, with LUCERNA_BACKEND=<its backend> there")
    setup.set_defaults(func=cmd_setup)

    models = sub.add_parser("models", help="write the random-weight test models")
    models.set_defaults(func=cmd_models)

    daemon = sub.add_parser("daemon", help="run one daemon in the foreground; its stream values "
                            "show on stderr unless you pass --stream-fd")
    daemon.add_argument("role", choices=sorted(ROLES))
    daemon.add_argument("model", help="GGUF file")
    daemon.set_defaults(func=cmd_daemon, passthrough="daemon")

    add_bench_parser(sub)
    add_niah_parser(sub)
    add_clients_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # `test` hands unknown arguments to pytest and `daemon` to the daemon, so that
    # `lucerna test -k chat -x` and `lucerna daemon qwen35 m.gguf --n-ctx=2048` work.
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "passthrough", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    args.log_level_given = args.log_level is not None
    logging.basicConfig(
        level=(args.log_level or "INFO").upper(),
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
