"""The per-model queue and client disconnects, end to end through hypercorn's Trio worker.

Each test runs a real ``lucerna serve`` and observes it from outside: /status for the
queue, the log for what the daemon was told, and timing for whether a generation
really stopped (a daemon that kept generating would hold up the next request).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

# /v1/completions on a raw counting prompt: the base model continues it for as long
# as it is allowed to, so a long max_tokens really means a long generation.
LONG: dict[str, Any] = {"model": "gemma3-270m", "prompt": "1, 2, 3, 4, 5,", "max_tokens": 1500,
        "temperature": 0}
SHORT = {**LONG, "max_tokens": 4}


@pytest.fixture
def queued_server(
    native: NativeBuild, default_model: Path, tmp_path: Path,
) -> Iterator[LucernaServer]:
    # One generation at a time (the default parallel fits the memory, docs/batching.md):
    # these tests are about the request that waits behind it.
    srv = LucernaServer(tmp_path / "serve.log", "--model", "default",
                        "--n-ctx", "2048", "--queue-limit", "1", "--parallel", "1")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def queue(server: LucernaServer) -> dict[str, int]:
    status = httpx.get(f"{server.base_url}/status").json()
    return status["models"]["gemma3-270m"]["queue"]  # type: ignore[no-any-return]


def idle(state: dict[str, int]) -> bool:
    return state["waiting"] == 0 and state["running"] == 0


def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def open_stream(
    client: httpx.Client, server: LucernaServer, body: dict[str, Any],
) -> httpx.Response:
    request = client.build_request("POST", f"{server.base_url}/v1/completions",
                                   json={**body, "stream": True})
    return client.send(request, stream=True)


@pytest.mark.slow
def test_full_queue_is_a_503_before_any_sse_and_disconnects_free_it(
    queued_server: LucernaServer,
) -> None:
    with httpx.Client(timeout=30) as a, httpx.Client(timeout=30) as b:
        running = open_stream(a, queued_server, LONG)
        assert running.status_code == 200
        # Keep the iterator: a dropped one is closed, and httpcore closes the stream.
        lines = running.iter_lines()
        next(lines)  # the generation is under way
        # The second request waits in the queue: its headers cannot come yet.
        waiting_request = b.build_request("POST", f"{queued_server.base_url}/v1/completions",
                                          json={**LONG, "stream": True})
        waiting_result: dict[str, object] = {}

        def wait_in_queue() -> None:
            try:
                response = b.send(waiting_request, stream=True)
                waiting_result["status"] = response.status_code
                response.close()
            except httpx.HTTPError as exc:
                waiting_result["error"] = exc

        waiter = threading.Thread(target=wait_in_queue, daemon=True)
        waiter.start()
        wait_for(lambda: queue(queued_server)["waiting"] == 1)

        # The third is refused at once, as JSON, with Retry-After.
        started = time.monotonic()
        refused = httpx.post(f"{queued_server.base_url}/v1/completions",
                             json={**LONG, "stream": True}, timeout=10)
        assert time.monotonic() - started < 2
        assert refused.status_code == 503
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.headers["retry-after"]
        assert refused.json()["error"]["code"] == "queue_full"
        assert queue(queued_server)["refused"] == 1

        # Closing the running stream cancels its generation in the daemon at once:
        # the queued request gets its turn long before 1500 tokens could be written.
        running.close()
        waiter.join(timeout=10)
        assert waiting_result.get("status") == 200
    wait_for(lambda: idle(queue(queued_server)))
    assert "left early; stopped after" in queued_server.log()


@pytest.mark.slow
def test_disconnect_while_queued_leaves_the_queue_at_once(queued_server: LucernaServer) -> None:
    with httpx.Client(timeout=30) as a:
        running = open_stream(a, queued_server, LONG)
        lines = running.iter_lines()
        next(lines)
        # A raw socket, so the test decides exactly when this queued client leaves.
        body = json.dumps({**LONG, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", queued_server.port)) as queued:
            queued.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            wait_for(lambda: queue(queued_server)["waiting"] == 1)
        # Gone from the queue while the first generation still runs.
        wait_for(lambda: queue(queued_server)["waiting"] == 0)
        assert queue(queued_server)["running"] == 1
        running.close()
    wait_for(lambda: queue(queued_server)["running"] == 0)
    # The abandoned request never reached the daemon: exactly one generation was stopped.
    assert queued_server.log().count("left early; stopped after") == 1


@pytest.mark.slow
def test_non_streaming_client_that_gives_up_stops_its_generation(
    queued_server: LucernaServer,
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{queued_server.base_url}/v1/completions", json=LONG, timeout=1.5)
    wait_for(lambda: queue(queued_server)["running"] == 0)
    stopped = re.search(r"left early; stopped after (\d+) tokens", queued_server.log())
    assert stopped is not None and int(stopped.group(1)) < LONG["max_tokens"]
    response = httpx.post(f"{queued_server.base_url}/v1/completions", json=SHORT, timeout=60)
    assert response.status_code == 200
