"""Running a real coding agent against a real Lucerna, as a user runs it.

Each run gets the agent's pinned install (``orchestrator.clients.ensure_client``), the
exact environment and arguments ``lucerna clients`` prints for that server, and a
home of its own: ``HOME``, ``CODEX_HOME`` and the XDG folders point into a fresh
directory, so no user configuration, key or session is read and nothing is left
behind. The environment is built from nothing (not inherited) for the same reason,
and with each agent's switches for its own calls home (updates, telemetry, model
catalogs, plugins) turned off: the only network an agent reaches is the server.

A run has a hard wall-clock limit; past it the agent's whole process group is
killed and the test fails with what it printed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from orchestrator.clients import client_config, client_named, ensure_client
from tests.conftest import LucernaServer

__all__ = [
    "AgentRun",
    "ServedRequest",
    "assert_served_cleanly",
    "run_agent",
    "served_requests",
    "server_props",
]

OFFLINE_ENV: Mapping[str, Mapping[str, str]] = {
    "codex": {},  # all in OFFLINE_ARGS
    "claude-code": {
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    },
    "opencode": {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # models.dev
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # would be fetched from npm
    },
}

OFFLINE_ARGS: Mapping[str, tuple[str, ...]] = {
    # Plugins sync a marketplace from GitHub, apps list connectors on chatgpt.com;
    # --strict-config fails the run if a later Codex no longer knows one of these keys.
    "codex": ("--strict-config", "-c", "check_for_update_on_startup=false",
              "-c", "analytics.enabled=false", "-c", "feedback.enabled=false",
              "-c", "features.plugins=false", "-c", "features.remote_plugin=false",
              "-c", "features.apps=false"),
    "claude-code": (),
    "opencode": (),
}


@dataclass(frozen=True)
class AgentRun:
    name: str
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    server_log: str
    """What the server logged while the agent ran."""

    def describe(self) -> str:
        return (f"{self.name} exited {self.returncode} after {self.seconds:.0f} s: "
                f"{' '.join(self.command)}\n--- stdout\n{self.stdout[-4000:]}\n"
                f"--- stderr\n{self.stderr[-4000:]}\n--- server log\n{self.server_log[-6000:]}")


def run_agent(name: str, server: LucernaServer, home: Path, prompt_args: list[str], *,
              env: Mapping[str, str] | None = None, timeout_s: float) -> AgentRun:
    """Run agent ``name`` headless against ``server`` with ``home`` as its home and
    ``home/project`` as its working directory, ``prompt_args`` after the configured
    arguments."""
    spec = client_named(name)
    binary = ensure_client(spec, progress=lambda message: None)
    config = client_config(name, server.base_url, server_props(server), api_key="none")
    project = home / "project"
    project.mkdir(parents=True, exist_ok=True)
    folders = {"HOME": home, "CODEX_HOME": home / ".codex",
               "XDG_CONFIG_HOME": home / ".config", "XDG_DATA_HOME": home / ".local/share",
               "XDG_STATE_HOME": home / ".local/state", "XDG_CACHE_HOME": home / ".cache"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    if name == "opencode":
        # OpenCode npm-installs @opencode-ai/plugin into its config folder unless that
        # folder has node_modules and a lock file that already lists the package.
        config_dir = folders["XDG_CONFIG_HOME"] / "opencode"
        (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
        (config_dir / "package-lock.json").write_text(json.dumps(
            {"packages": {"": {"dependencies": {"@opencode-ai/plugin": spec.version}}}}))
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "LUCERNA_API_KEY": "none",
        **{key: str(path) for key, path in folders.items()},
        **OFFLINE_ENV[name],
        **config.env,
        **(env or {}),
    }
    command = [str(binary), *config.args, *OFFLINE_ARGS[name], *prompt_args]
    log_start = len(server.log())
    started = time.monotonic()
    # Its own session: on a timeout the agent and everything it started are killed.
    process = subprocess.Popen(command, cwd=project, env=full_env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n[killed: no exit after {timeout_s:g} s]"
    seconds = time.monotonic() - started
    return AgentRun(name, command, process.returncode, stdout, stderr, seconds,
                    settled_log(server)[log_start:])


def settled_log(server: LucernaServer, quiet_s: float = 1.0, limit_s: float = 10.0) -> str:
    """The server's log once it stopped growing for ``quiet_s``: an agent may exit while
    a request of its own is still streaming (OpenCode's session title), and the server
    logs that request when it sees the connection close, a moment later."""
    log, quiet_since, deadline = server.log(), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() - quiet_since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.1)
        now = server.log()
        if len(now) != len(log):
            log, quiet_since = now, time.monotonic()
    return log


def server_props(server: LucernaServer) -> dict[str, Any]:
    response = httpx.get(f"{server.base_url}/props", timeout=10)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ServedRequest:
    method: str
    path: str
    status: int
    user_agent: str


# hypercorn's access log: `... "POST /v1/messages 1.1" 200 - "-" "claude-cli/2.1.328 ..."`;
# a request the client closed before its answer was complete logs status `-`.
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) [\d.]+" (?P<status>\d{3}|-) \S+ '
                     r'"[^"]*" "(?P<agent>[^"]*)"')


def served_requests(log: str) -> list[ServedRequest]:
    """The requests the server answered, from its access log."""
    return [ServedRequest(m["method"], m["path"].split("?")[0], int(m["status"]), m["agent"])
            for m in _ACCESS.finditer(log) if m["status"] != "-"]


def received_requests(log: str) -> list[ServedRequest]:
    """Every request that reached the server: the answered ones, and those the client
    closed before their answer was complete (status 0, logged with status `-`)."""
    return [ServedRequest(m["method"], m["path"].split("?")[0],
                          0 if m["status"] == "-" else int(m["status"]), m["agent"])
            for m in _ACCESS.finditer(log)]


_TROUBLE = re.compile(r" (?:ERROR|WARNING|CRITICAL) |Traceback \(most recent call last\)")


def assert_served_cleanly(run: AgentRun, endpoint: str) -> list[ServedRequest]:
    """The agent's requests were answered, ``endpoint`` at least once, and none with
    an error status; the server logged no warning, error or traceback meanwhile.
    Returns the requests."""
    requests = served_requests(run.server_log)
    assert any(r.method == "POST" and r.path == endpoint and r.status == 200
               for r in requests), run.describe()
    failed = [r for r in requests if r.status >= 400]
    assert not failed, f"requests answered with an error: {failed}\n{run.describe()}"
    trouble = [line for line in run.server_log.splitlines() if _TROUBLE.search(line)]
    assert not trouble, f"the server logged trouble: {trouble}\n{run.describe()}"
    return requests
