"""A daemon killed by a signal is noticed, logged, and never leaves a request hanging."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import openai
import pytest

from tests.conftest import LucernaServer

REQUEST = {
    "model": "gemma3-270m",
    "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
    "max_tokens": 1500,
    "temperature": 0,
    "stop": [],
}


@pytest.fixture
def own_server(native, default_model, tmp_path):  # type: ignore[no-untyped-def]
    srv = LucernaServer(tmp_path / "serve.log", "--n-ctx", "2048")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def daemon_pid(server: LucernaServer) -> int:
    health = httpx.get(f"{server.base_url}/health").json()
    return int(health["models"]["gemma3-270m"]["pid"])


@pytest.mark.slow
def test_daemon_killed_mid_stream(own_server: LucernaServer) -> None:
    pid = daemon_pid(own_server)
    events: list[str] = []
    started = time.monotonic()
    with httpx.stream("POST", f"{own_server.base_url}/v1/chat/completions",
                      json={**REQUEST, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if len(events) == 4:
                os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - started < 30
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "service_unavailable"
    assert "SIGKILL" in error["message"]

    # The supervisor has seen the death: health says so, new requests fail fast and clean.
    health = httpx.get(f"{own_server.base_url}/health")
    assert health.status_code == 503
    state = health.json()["models"]["gemma3-270m"]
    assert state["state"] == "died"
    assert "SIGKILL" in state["detail"]
    client = openai.OpenAI(base_url=f"{own_server.base_url}/v1", api_key="x", max_retries=0,
                           timeout=10)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="gemma3-270m", messages=REQUEST["messages"])
    assert refused.value.status_code == 503
    assert f"daemon pid {pid} was killed by SIGKILL" in own_server.log()


@pytest.mark.slow
def test_daemon_killed_while_idle(own_server: LucernaServer) -> None:
    pid = daemon_pid(own_server)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if httpx.get(f"{own_server.base_url}/health").status_code == 503:
            break
        time.sleep(0.05)
    state = httpx.get(f"{own_server.base_url}/health").json()["models"]["gemma3-270m"]
    assert state["state"] == "died"
    assert "SIGTERM" in state["detail"]
    response = httpx.post(f"{own_server.base_url}/v1/chat/completions",
                          json={**REQUEST, "max_tokens": 4}, timeout=10)
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    assert "died" in response.json()["error"]["message"]
