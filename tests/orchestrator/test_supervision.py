"""Daemon crashes are noticed, logged, restarted, and invisible to a request in flight."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gguf
import httpx
import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer, openai_chunks

# A prompt the base model answers at length, so the kill lands mid-answer.
MESSAGES = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
REQUEST = {"model": "gemma3-270m", "messages": MESSAGES, "max_tokens": 96, "temperature": 0}


@pytest.fixture
def own_server(
    native: NativeBuild, default_model: Path, tmp_path: Path,
) -> Iterator[LucernaServer]:
    srv = LucernaServer(tmp_path / "serve.log", "--model", "default", "--n-ctx", "2048")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def daemon_state(server: LucernaServer) -> dict[str, Any]:
    return httpx.get(f"{server.base_url}/health").json()["models"]["gemma3-270m"]  # type: ignore[no-any-return]


def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def stream_text(server: LucernaServer, kill_after: int | None = None) -> tuple[str, str]:
    """Stream REQUEST; optionally SIGKILL the daemon after ``kill_after`` text chunks."""
    pid = daemon_state(server)["pid"]
    pieces: list[str] = []
    finish = ""
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions",
                      json={**REQUEST, "stream": True}, timeout=60) as response:
        for chunk in openai_chunks(response):
            choice = chunk["choices"][0]
            pieces.append(choice["delta"].get("content") or "")
            finish = choice["finish_reason"] or finish
            if kill_after is not None and len(pieces) == kill_after:
                os.kill(pid, signal.SIGKILL)
    return "".join(pieces), finish


@pytest.mark.slow
def test_stream_survives_a_daemon_kill_and_matches_an_uninterrupted_run(
    own_server: LucernaServer,
) -> None:
    uninterrupted, finish = stream_text(own_server)
    first_pid = daemon_state(own_server)["pid"]
    assert len(uninterrupted) > 60, uninterrupted
    resumed, resumed_finish = stream_text(own_server, kill_after=10)
    assert resumed == uninterrupted
    assert resumed_finish == finish
    state = daemon_state(own_server)
    assert state["restarts"] == 1 and state["crashes"] == 1
    assert state["pid"] != first_pid, (state, first_pid)
    assert "SIGKILL" in state["last_exit"]
    log = own_server.log()
    assert f"crash: daemon pid {first_pid} was killed by SIGKILL" in log
    assert "daemon restarted (restart 1)" in log
    assert "resuming on the restarted daemon" in log


@pytest.mark.slow
def test_daemon_killed_while_idle_is_restarted(own_server: LucernaServer) -> None:
    # SIGKILL: a crash. (SIGTERM would be an orderly exit 0, PROTOCOL.md section 1,
    # which the supervisor restarts as well but reports as an exit, not a kill.)
    first_pid = daemon_state(own_server)["pid"]
    os.kill(first_pid, signal.SIGKILL)
    wait_for(lambda: daemon_state(own_server)["restarts"] == 1
             and daemon_state(own_server)["state"] == "ready")
    state = daemon_state(own_server)
    assert "SIGKILL" in state["last_exit"] and state["crashes"] == 1
    assert state["pid"] != first_pid
    response = httpx.post(f"{own_server.base_url}/v1/chat/completions",
                          json={**REQUEST, "max_tokens": 4}, timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"]


@pytest.mark.slow
def test_a_request_sent_while_the_daemon_restarts_waits_for_it(
    native: NativeBuild, default_model: Path, tmp_path: Path,
) -> None:
    # A restart delay holds the daemon down long enough to send the request into it.
    config = tmp_path / "lucerna.toml"
    config.write_text('[[models]]\nname = "gemma3-270m"\npath = "default"\nn_ctx = 2048\n'
                      "restart = { first_delay_s = 3 }\n")
    server = LucernaServer(tmp_path / "serve.log", "--config", str(config))
    try:
        server.wait_healthy()
        os.kill(daemon_state(server)["pid"], signal.SIGKILL)
        wait_for(lambda: daemon_state(server)["state"] == "restarting")
        sent = time.monotonic()
        response = httpx.post(f"{server.base_url}/v1/chat/completions",
                              json={**REQUEST, "max_tokens": 4}, timeout=60)
        assert response.status_code == 200, response.text  # not a 503
        assert response.json()["choices"][0]["message"]["content"]
        assert time.monotonic() - sent > 1.0  # it was answered by the restarted daemon
        assert daemon_state(server)["restarts"] == 1
    finally:
        server.stop()


@pytest.mark.slow
def test_a_daemon_that_never_loads_makes_the_server_exit_non_zero(
    native: NativeBuild, tmp_path: Path,
) -> None:
    # A GGUF that announces gemma3 but holds no tensors: the front end and the daemon
    # accept the architecture, then the engine fails to load it, every time.
    broken = tmp_path / "broken.gguf"
    writer = gguf.GGUFWriter(broken, "gemma3")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    server = LucernaServer(tmp_path / "serve.log", "--model", str(broken),
                           "--restart-max-failures", "2")
    try:
        code = server.process.wait(timeout=60)
    finally:
        server.stop()
    assert code != 0
    log = server.log()
    assert "gave up after 2 failures in a row" in log
    assert "failed to load" in log
