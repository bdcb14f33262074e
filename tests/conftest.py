"""Shared fixtures: the real engine, daemons and models, built once per session; the tiers.

Nothing here is a fake: fixtures build the native daemons against the pinned
engine, assemble the real default model, and start real servers as subprocesses,
exactly as a user runs them. (The in-memory daemon for the middle layer is
tests/fake_daemon.py, and says so.)

Two tiers run the same tests (tests/_tiers.py): the fast one by default, the full one
with ``--full`` (``bin/lucerna test --full``, CI). They differ by depth, not by
coverage: a matrix runs its first entry in the fast tier and every entry in the full
one (``tiered``), and a test that repeats something (kills, cycles, fuzz lines, a soak)
asks ``depth(quick=..., full=...)`` how often.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import settings

from daemons.default_model import ensure_chat_model, ensure_default_model
from daemons.native import NativeBuild, ensure_native
from daemons.paths import repo_root
from tests._tiers import Depth, TierPlugin

# No per-example deadline: two workers share two cores with daemons and servers, and an
# example's wall time says nothing about the property under test. What each property
# covers (its examples) is hypothesis's default, the same in both tiers.
settings.register_profile("lucerna", deadline=None)
settings.load_profile("lucerna")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-clients", action="store_true",
                     help="skip the tests that run the real coding agents (tests/clients; "
                     "`bin/lucerna test --no-clients` also skips installing them). CI "
                     "never passes it.")
    TierPlugin.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TierPlugin(config), "lucerna-tiers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--no-clients"):
        return
    skip = pytest.mark.skip(reason="--no-clients: the real coding agents are not run")
    for item in items:
        if item.get_closest_marker("clients") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def depth(pytestconfig: pytest.Config) -> Depth:
    """How deep this tier goes: ``depth(quick=10, full=100)`` (tests/_tiers.py)."""
    return Depth(full=bool(pytestconfig.getoption("--full")))


@pytest.fixture(scope="session")
def native() -> NativeBuild:
    return ensure_native(progress=lambda message: None)


@pytest.fixture(scope="session")
def default_model() -> Path:
    return ensure_default_model(progress=lambda message: None)


@pytest.fixture(scope="session")
def chat_model() -> Path:
    return ensure_chat_model(progress=lambda message: None)


@pytest.fixture(scope="session")
def test_models(native: NativeBuild) -> dict[str, Path]:
    from daemons.testmodels import ensure_test_models

    return ensure_test_models(progress=lambda message: None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unused_port() -> int:
    """A localhost TCP port nothing listens on (at the time of asking)."""
    return free_port()


class LucernaServer:
    """``lucerna serve`` in a subprocess, its log captured to a file."""

    def __init__(self, log_path: Path, *extra_args: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(self.port),
             *extra_args],
            cwd=repo_root(), stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_healthy(self, timeout: float = 180.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}:\n{self.log()}")
            try:
                response = httpx.get(f"{self.base_url}/health", timeout=2)
                if response.status_code == 200:
                    return response.json()  # type: ignore[no-any-return]
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"server not healthy after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture(scope="session")
def server(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    """One shared server on the default model for tests that do not break it."""
    srv = LucernaServer(tmp_path_factory.mktemp("server") / "serve.log", "--model", "default",
                        "--n-ctx", "2048")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def openai_chunks(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON chunks of an OpenAI-style SSE stream, up to ``[DONE]``; none is an error."""
    assert response.status_code == 200, response.read()
    for line in response.iter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk: dict[str, Any] = json.loads(line[6:])
        assert "error" not in chunk, chunk
        yield chunk
