"""Daemon crashes are noticed, logged, restarted, and invisible to a request in flight."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gguf
import httpx
import pytest

from daemons.native import NativeBuild
from orchestrator.generation import MAX_RECOVERIES
from tests._tiers import Depth
from tests.conftest import LucernaServer, openai_chunks

# A prompt the base model answers at length, so the kill lands mid-answer.
MESSAGES = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
REQUEST = {"model": "gemma3-270m", "messages": MESSAGES, "max_tokens": 96, "temperature": 0}


@pytest.fixture
def own_server(
    native: NativeBuild, default_model: Path, tmp_path: Path,
) -> Iterator[LucernaServer]:
    # Deterministic: a resumed stream re-prefills prompt + generated tokens in one batch,
    # which equals decoding them one by one only with batch-invariant kernels (with the
    # defaults gemma3's Q4_K weights take another kernel for a batch than for one row).
    srv = LucernaServer(tmp_path / "serve.log", "--model", "default", "--n-ctx", "2048",
                        "--deterministic")
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


# The kill storm: an OOM killer under memory pressure, taking the serving daemon every
# one to three seconds while several clients stream (100 kills; 10 in the fast tier).
STORM_CLIENTS = 3
STORM_PROMPTS = [f"Count from {start} to {start + 60}, separated by commas."
                 for start in (1, 200, 5000)]


class StreamClock:
    """When any client last received text."""

    def __init__(self) -> None:
        self.at = 0.0

    def tick(self) -> None:
        self.at = time.monotonic()

    def ticked_since(self, moment: float) -> bool:
        return self.at > moment


def replaced(server: LucernaServer, killed_pid: int) -> bool:
    state = daemon_state(server)
    return bool(state["state"] == "ready" and state["pid"] != killed_pid)


def storm_request(prompt: str) -> dict[str, Any]:
    return {**REQUEST, "messages": [{"role": "user", "content": prompt}], "max_tokens": 48}


def stream_outcome(server: LucernaServer, prompt: str,
                   on_text: Callable[[], None] = lambda: None) -> tuple[str, str | None]:
    """(text, None) for a finished stream, ("", error message) for a clean error: an
    HTTP error status, or an error event that ends the stream. Anything else (a cut
    connection, a stream without its finish) fails the test."""
    pieces: list[str] = []
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions",
                      json={**storm_request(prompt), "stream": True}, timeout=120) as response:
        if response.status_code != 200:
            body = json.loads(response.read())
            return "", body["error"]["message"]
        finish = None
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return "", chunk["error"]["message"]
            choice = chunk["choices"][0]
            pieces.append(choice["delta"].get("content") or "")
            finish = choice["finish_reason"] or finish
            if pieces[-1]:  # text, so the daemon streamed tokens (the role chunk has none)
                on_text()
    assert finish is not None, f"a stream ended without its finish: {''.join(pieces)!r}"
    return "".join(pieces), None


@pytest.mark.slow
def test_a_storm_of_kills_mid_stream_never_takes_the_server_down(
    own_server: LucernaServer, depth: Depth,
) -> None:
    kills = depth(quick=10, full=100)
    # Greedy resumes re-prefill prompt + generated tokens, which equals decoding them
    # one by one in the deterministic mode (own_server): the solo runs below are what
    # every uninterrupted and resumed stream must give.
    solo = {prompt: stream_outcome(own_server, prompt)[0] for prompt in STORM_PROMPTS}
    assert all(len(text) > 40 for text in solo.values()), solo
    stop = threading.Event()
    outcomes: list[tuple[str, str, str | None]] = []
    failures: list[BaseException] = []
    last_chunk_at = StreamClock()

    def client(prompt: str) -> None:
        try:
            while not stop.is_set():
                text, error = stream_outcome(own_server, prompt, last_chunk_at.tick)
                outcomes.append((prompt, text, error))
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=client, args=(prompt,), daemon=True)
               for prompt in STORM_PROMPTS[:STORM_CLIENTS]]
    for thread in threads:
        thread.start()
    pace = random.Random(13)
    restart_s: list[float] = []
    ready_at = time.monotonic()
    try:
        for _ in range(kills):
            time.sleep(pace.uniform(1.0, 3.0))
            assert not failures, failures
            assert own_server.process.poll() is None, own_server.log()[-3000:]
            # Mid-stream: the daemon has streamed to a client since it came up.
            wait_for(functools.partial(last_chunk_at.ticked_since, ready_at), timeout=60)
            pid = daemon_state(own_server)["pid"]
            killed_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_for(functools.partial(replaced, own_server, pid), timeout=30)
            ready_at = time.monotonic()
            restart_s.append(ready_at - killed_at)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert not failures, failures
    assert own_server.process.poll() is None, own_server.log()[-3000:]
    assert daemon_state(own_server)["crashes"] == kills
    finished = [(prompt, text) for prompt, text, error in outcomes if error is None]
    errors = [error for _, _, error in outcomes if error is not None]
    # One request at a time, each killed daemon a restart: a few dozen streams finish
    # (a hundred kills), most of them resumed after a kill mid-stream.
    assert len(finished) >= kills // 10, (len(finished), errors[:5])
    assert own_server.log().count("resuming on the restarted daemon") >= kills // 2
    for prompt, text in finished:
        assert text == solo[prompt], (prompt, text, solo[prompt])
    for error in errors:
        assert "gemma3-270m" in error, error  # says which model, not a traceback
    # Every restart was immediate: no backoff for daemons that were serving.
    log = own_server.log()
    delays = re.findall(r"restarting its daemon in ([\d.]+) s", log)
    unexpected = [line for line in log.splitlines()
                  if "failed to load" in line or "before it served" in line]
    assert delays == ["0.0"] * kills, (Counter(delays), unexpected[:4])
    assert max(restart_s) < 10, sorted(restart_s)[-5:]


@pytest.mark.slow
def test_a_request_whose_daemon_dies_under_it_again_and_again_ends_cleanly(
    own_server: LucernaServer,
) -> None:
    # A poison request: its daemon dies during its prefill, every time, before it
    # produces a token (here SIGKILL 0.3 s into a ~1,850-token prefill stands in for a
    # prompt that crashes the engine). It ends with a 503 after MAX_RECOVERIES + 1
    # deaths; the server stays up and serves the next request.
    long_prompt = "Repeat after me: " + " ".join(f"word{i}" for i in range(480))
    result: list[httpx.Response] = []
    request = threading.Thread(target=lambda: result.append(httpx.post(
        f"{own_server.base_url}/v1/chat/completions", timeout=120,
        json={**REQUEST, "messages": [{"role": "user", "content": long_prompt}]})))
    pid = daemon_state(own_server)["pid"]
    request.start()
    for _ in range(MAX_RECOVERIES + 1):
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        if _ < MAX_RECOVERIES:
            wait_for(functools.partial(replaced, own_server, pid), timeout=30)
            pid = daemon_state(own_server)["pid"]
    request.join(timeout=120)
    assert result and result[0].status_code == 503, result and result[0].text
    error = result[0].json()["error"]["message"]
    assert f"died {MAX_RECOVERIES + 1} times in a row under this request" in error, error
    assert "poison request" in own_server.log()
    wait_for(functools.partial(replaced, own_server, pid), timeout=30)
    response = httpx.post(f"{own_server.base_url}/v1/chat/completions",
                          json={**REQUEST, "max_tokens": 4}, timeout=60)
    assert response.status_code == 200, response.text
    assert own_server.process.poll() is None
