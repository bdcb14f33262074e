"""/metrics and /status on a real server: request counts, tokens, timings, daemon facts."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

MESSAGES = [{"role": "user", "content": "Count to five."}]


@pytest.fixture(scope="module")
def observed(
    native: NativeBuild, test_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("metrics")
    server = LucernaServer(folder / "serve.log", "--model", str(test_models["qwen3"]),
                           "--model-name", "qwen3", "--n-ctx", "512", "--max-output-tokens", "64")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def samples(server: LucernaServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(f"{server.base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def value(table: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return table.get((name, frozenset(labels.items())), 0.0)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_requests_tokens_and_timings_are_counted(observed: LucernaServer) -> None:
    before = samples(observed)
    url = f"{observed.base_url}/v1/chat/completions"
    usage = []
    plain = httpx.post(url, json={"model": "qwen3", "messages": MESSAGES, "max_tokens": 6,
                                  "temperature": 0}, timeout=60)
    assert plain.status_code == 200
    usage.append(plain.json()["usage"])
    with httpx.stream("POST", url, timeout=60, json={
            "model": "qwen3", "messages": MESSAGES, "max_tokens": 9, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}) as stream:
        chunks = [json.loads(line[6:]) for line in stream.iter_lines()
                  if line.startswith("data: {")]
    usage.append(chunks[-1]["usage"])
    assert httpx.post(url, json={"model": "absent", "messages": MESSAGES}).status_code == 404
    assert httpx.get(f"{observed.base_url}/no/such/route").status_code == 404
    after = samples(observed)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    chat = {"endpoint": "/v1/chat/completions"}
    assert delta("lucerna_requests_total", model="qwen3", status="200", **chat) == 2
    # Unknown models and unknown paths are counted without growing the label sets.
    assert delta("lucerna_requests_total", model="", status="404", **chat) == 1
    assert delta("lucerna_requests_total", model="", endpoint="unmatched", status="404") == 1
    assert delta("lucerna_tokens_prompt_total", model="qwen3") == sum(
        u["prompt_tokens"] for u in usage)
    assert delta("lucerna_tokens_generated_total", model="qwen3") == sum(
        u["completion_tokens"] for u in usage)
    assert delta("lucerna_time_to_first_token_seconds_count", model="qwen3") == 2
    assert delta("lucerna_request_duration_seconds_count", model="qwen3", **chat) == 2
    ttft = delta("lucerna_time_to_first_token_seconds_sum", model="qwen3")
    duration = delta("lucerna_request_duration_seconds_sum", model="qwen3", **chat)
    assert 0 < ttft < duration


def test_daemon_process_facts_match_psutil(observed: LucernaServer) -> None:
    status = httpx.get(f"{observed.base_url}/status").json()
    model = status["models"]["qwen3"]
    pid = model["pid"]
    assert pid == httpx.get(f"{observed.base_url}/health").json()["models"]["qwen3"]["pid"]
    daemon = psutil.Process(pid)
    table = samples(observed)
    rss = value(table, "lucerna_daemon_resident_memory_bytes", model="qwen3")
    assert rss > 10 * 1024 * 1024  # a loaded model, not an empty process
    assert abs(rss - daemon.memory_info().rss) < 0.2 * rss
    assert value(table, "lucerna_daemon_open_fds", model="qwen3") == daemon.num_fds()
    cpu = daemon.cpu_times()
    assert 0 < value(table, "lucerna_daemon_cpu_seconds_total", model="qwen3") <= (
        cpu.user + cpu.system + 0.5)
    assert value(table, "lucerna_daemon_threads", model="qwen3") == daemon.num_threads()
    assert value(table, "lucerna_daemon_up", model="qwen3") == 1
    assert value(table, "lucerna_daemon_state", model="qwen3", state="ready") == 1
    assert value(table, "lucerna_daemon_state", model="qwen3", state="failed") == 0
    assert value(table, "lucerna_queue_limit", model="qwen3") == 16
    assert value(table, "lucerna_queue_waiting", model="qwen3") == 0
    assert value(table, "lucerna_model_context_tokens", model="qwen3") == model["n_ctx"]
    assert value(table, "lucerna_frontend_process_resident_memory_bytes") > 0

    assert status["version"] and status["uptime_s"] > 0
    assert model["state"] == "ready"
    assert (model["architecture"], model["role"], model["max_output_tokens"]) == (
        "qwen3", "qwen35", 64)
    assert model["n_ctx"] >= 512
    assert model["queue"] == {"waiting": 0, "running": 0, "refused": 0, "limit": 16}
    assert model["open_fds"] == daemon.num_fds()
    assert abs(model["rss_bytes"] - daemon.memory_info().rss) < 0.2 * model["rss_bytes"]
    assert model["cpu_seconds"] > 0 and model["threads"] == daemon.num_threads()
    assert (model["restarts"], model["crashes"], model["failed_loads"], model["last_exit"]) == (
        0, 0, 0, None)


def test_a_crash_shows_in_the_counters(observed: LucernaServer, tmp_path: Path) -> None:
    first = httpx.get(f"{observed.base_url}/status").json()["models"]["qwen3"]
    os.kill(first["pid"], signal.SIGKILL)

    def restarted() -> bool:
        model = httpx.get(f"{observed.base_url}/status").json()["models"]["qwen3"]
        return model["state"] == "ready" and model["pid"] not in (None, first["pid"])

    wait_for(restarted)
    model = httpx.get(f"{observed.base_url}/status").json()["models"]["qwen3"]
    assert (model["restarts"], model["crashes"]) == (first["restarts"] + 1, first["crashes"] + 1)
    assert "SIGKILL" in model["last_exit"]
    table = samples(observed)
    assert value(table, "lucerna_daemon_restarts_total", model="qwen3") == model["restarts"]
    assert value(table, "lucerna_daemon_crashes_total", model="qwen3") == model["crashes"]
    assert value(table, "lucerna_daemon_failed_loads_total", model="qwen3") == 0
