"""Models on demand (orchestrator/residency.py) against a real server and real daemons.

Five names for the small qwen3 test model, each its own daemon, all loaded on demand:
``a`` and ``b`` share group ``g``, whose budget holds one of them; ``p`` parks after an
idle second, ``s`` stops after one; ``broken`` is a GGUF that never loads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import httpx
import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

KEY = "on-demand-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ASK = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 6,
       "temperature": 0}


@pytest.fixture(scope="module")
def server(native: NativeBuild, test_models: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("on-demand")
    broken = folder / "broken.gguf"  # announces gemma3, holds no tensors: never loads
    writer = gguf.GGUFWriter(broken, "gemma3")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    qwen3 = test_models["qwen3"]
    # Each awake qwen3 holds about 19 MiB of weights (its stats' bytes_host): two do not
    # fit in group g's 30 MiB.
    config = folder / "lucerna.toml"
    config.write_text(f"""
[server]
api_key = "{KEY}"
group_memory_mib = {{ g = 30 }}

[[models]]
name = "a"
path = "{qwen3}"
load = "on_demand"
group = "g"

[[models]]
name = "b"
path = "{qwen3}"
load = "on_demand"
group = "g"

[[models]]
name = "p"
path = "{qwen3}"
load = "on_demand"
idle = "1s"

[[models]]
name = "s"
path = "{qwen3}"
load = "on_demand"
idle = "1s"
idle_action = "stop"

[[models]]
name = "broken"
path = "{broken}"
load = "on_demand"
restart = {{ max_failures = 1 }}
""")
    srv = LucernaServer(folder / "serve.log", "--config", str(config), "--n-ctx", "256",
                        "--threads", "1")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def ask(server: LucernaServer, model: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", headers=AUTH, timeout=120,
                      json={**ASK, "model": model})


def residency(server: LucernaServer, model: str) -> dict[str, Any]:
    status = httpx.get(f"{server.base_url}/status", headers=AUTH).json()
    return status["models"][model]["residency"]  # type: ignore[no-any-return]


def listed_states(server: LucernaServer) -> dict[str, str]:
    data = httpx.get(f"{server.base_url}/v1/models", headers=AUTH).json()["data"]
    return {m["id"]: m["meta"]["state"] for m in data}


def wait_state(server: LucernaServer, model: str, state: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while residency(server, model)["state"] != state:
        assert time.monotonic() < deadline, residency(server, model)
        time.sleep(0.1)


def test_nothing_loads_at_boot_and_a_request_starts_its_model(server: LucernaServer) -> None:
    assert listed_states(server) == {name: "unloaded" for name in ("a", "b", "p", "s",
                                                                    "broken")}
    health = httpx.get(f"{server.base_url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    reply = ask(server, "p")
    assert reply.status_code == 200, reply.text
    p = residency(server, "p")
    assert p["wakes"] == {"start": 1}
    assert p["last_wake_s"] > 0 and p["awake_memory_bytes"] > 1 << 20  # from stats


def test_an_idle_model_is_parked_and_woken_with_the_same_answer(
        server: LucernaServer) -> None:
    first = ask(server, "p").json()["choices"][0]["message"]["content"]
    wait_state(server, "p", "parked")
    p = residency(server, "p")
    assert p["parks"].get("park:idle", 0) >= 1 and p["memory_bytes"] == 0
    daemon = httpx.get(f"{server.base_url}/status", headers=AUTH).json()["models"]["p"]
    assert daemon["pid"] is not None  # parked: the process stays
    again = ask(server, "p")
    assert again.status_code == 200
    assert again.json()["choices"][0]["message"]["content"] == first  # greedy, same weights
    assert residency(server, "p")["wakes"]["unpark"] >= 1


def test_an_idle_model_with_idle_action_stop_is_stopped_and_restarted(
        server: LucernaServer) -> None:
    assert ask(server, "s").status_code == 200
    wait_state(server, "s", "unloaded")
    s = residency(server, "s")
    assert s["parks"] == {"stop:idle": 1}
    daemon = httpx.get(f"{server.base_url}/status", headers=AUTH).json()["models"]["s"]
    assert daemon["pid"] is None
    assert ask(server, "s").status_code == 200
    assert residency(server, "s")["wakes"] == {"start": 2}


def test_a_wake_past_the_groups_budget_parks_the_least_recently_used(
        server: LucernaServer) -> None:
    assert ask(server, "a").status_code == 200
    assert ask(server, "b").status_code == 200  # a and b do not fit together: a parks
    assert residency(server, "a")["state"] == "parked"
    assert residency(server, "a")["parks"] == {"park:lru": 1}
    assert residency(server, "b")["state"] == "ready"
    assert ask(server, "a").status_code == 200  # and back
    assert (residency(server, "a")["state"], residency(server, "b")["state"]) == (
        "ready", "parked")
    assert residency(server, "b")["parks"] == {"park:lru": 1}


def test_concurrent_requests_for_a_waking_model_share_one_wake(
        server: LucernaServer) -> None:
    unload = httpx.post(f"{server.base_url}/models/a/unload", headers=AUTH, timeout=60)
    assert unload.status_code == 200 and unload.json()["state"] == "unloaded"
    starts = residency(server, "a")["wakes"].get("start", 0)
    codes: list[int] = []
    threads = [threading.Thread(target=lambda: codes.append(ask(server, "a").status_code))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert codes == [200, 200, 200]
    assert residency(server, "a")["wakes"]["start"] == starts + 1


def test_load_and_unload_for_scripts_need_the_key(server: LucernaServer) -> None:
    assert httpx.post(f"{server.base_url}/models/b/load").status_code == 401
    loaded = httpx.post(f"{server.base_url}/models/b/load", headers=AUTH, timeout=60)
    assert loaded.status_code == 200 and loaded.json()["state"] == "ready"
    parked = httpx.post(f"{server.base_url}/models/b/unload?action=park", headers=AUTH)
    assert parked.status_code == 200 and parked.json()["state"] == "parked"
    assert residency(server, "b")["parks"].get("park:request") == 1
    bad = httpx.post(f"{server.base_url}/models/b/unload?action=nap", headers=AUTH)
    assert bad.status_code == 400
    assert httpx.post(f"{server.base_url}/models/zz/load", headers=AUTH).status_code == 404


def test_a_wake_that_fails_is_a_503_with_the_reason(server: LucernaServer) -> None:
    reply = ask(server, "broken")
    assert reply.status_code == 503
    message = reply.json()["error"]["message"]
    assert "'broken'" in message and "could not be loaded" in message, message
    assert "failed to load" in message, message
    assert httpx.get(f"{server.base_url}/health").json()["status"] == "ok"  # still serving
    assert ask(server, "p").status_code == 200


def test_wakes_and_parks_are_metrics(server: LucernaServer) -> None:
    text = httpx.get(f"{server.base_url}/metrics", headers=AUTH).text
    a = residency(server, "a")
    assert a["parks"]["park:lru"] >= 2  # for b's wake in two tests above
    assert f'lucerna_model_wakes_total{{kind="start",model="a"}} {a["wakes"]["start"]}.0' in text
    assert (f'lucerna_model_parks_total{{kind="park",model="a",reason="lru"}} '
            f'{a["parks"]["park:lru"]}.0') in text
    assert 'lucerna_model_wake_seconds_total{kind="unpark",model="p"}' in text
    assert 'lucerna_model_parked{model="b"} 1.0' in text


def test_park_keeps_the_prefix_caches_snapshots_and_a_stop_forgets_them(
        server: LucernaServer) -> None:
    # The daemon's snapshot slots survive a park; a stopped daemon's are gone, and its
    # successor's PrefixCache.daemon_started forgets the index.
    first = [{"role": "system", "content": "You name things. " * 8},
             {"role": "user", "content": "Name a colour."}]
    other = [{"role": "user", "content": "Name a fruit, please."}]

    def cached(model: str, messages: list[dict[str, str]]) -> int:
        reply = httpx.post(f"{server.base_url}/v1/chat/completions", headers=AUTH, timeout=120,
                           json={**ASK, "model": model, "messages": messages})
        assert reply.status_code == 200, reply.text
        return int(reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    def entries(model: str) -> int:
        status = httpx.get(f"{server.base_url}/status", headers=AUTH).json()
        return int(status["models"][model]["prefix_cache"]["ram_entries"])

    for model, sleeps_as in (("p", "parked"), ("s", "unloaded")):
        cached(model, first)
        cached(model, other)  # another conversation: the first one's state is kept
        assert entries(model) >= 1, model
        wait_state(server, model, sleeps_as)
        again = cached(model, first)
        if sleeps_as == "parked":
            assert again > 0, model
        else:
            assert again == 0, model
