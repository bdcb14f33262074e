"""Several models behind one listener, each request routed by its ``model`` field."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import psutil
import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

MESSAGES = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def two_models(native: NativeBuild, default_model: Path, test_models: dict[str, Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("multi")
    config = folder / "lucerna.toml"
    config.write_text(f"""
[[models]]
name = "gemma3-270m"
path = "default"

[[models]]
name = "qwen3-test"
path = "{test_models['qwen3']}"
queue_limit = 4
""")
    # A flag with a config sets that value for every model.
    server = LucernaServer(folder / "serve.log", "--config", str(config), "--n-ctx", "1024")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def test_both_models_are_listed_healthy_and_separate(two_models: LucernaServer) -> None:
    listed = httpx.get(f"{two_models.base_url}/v1/models").json()["data"]
    assert [(m["id"], m["meta"]["architecture"]) for m in listed] == [
        ("gemma3-270m", "gemma3"), ("qwen3-test", "qwen3")]
    assert all(m["meta"]["n_ctx"] == 1024 for m in listed)
    health = httpx.get(f"{two_models.base_url}/health").json()
    assert health["status"] == "ok"
    assert set(health["models"]) == {"gemma3-270m", "qwen3-test"}
    status = httpx.get(f"{two_models.base_url}/status").json()["models"]
    pids = {name: model["pid"] for name, model in status.items()}
    assert len(set(pids.values())) == 2  # one daemon each
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    assert status["qwen3-test"]["queue"]["limit"] == 4
    assert status["gemma3-270m"]["queue"]["limit"] == 16


def test_requests_are_routed_by_model(two_models: LucernaServer) -> None:
    client = openai.OpenAI(base_url=f"{two_models.base_url}/v1", api_key="unused",
                           max_retries=0)
    results: dict[str, openai.types.chat.ChatCompletion] = {}

    def ask(name: str) -> None:
        results[name] = client.chat.completions.create(
            model=name, messages=MESSAGES, max_tokens=3, temperature=0)  # type: ignore[arg-type]

    # At the same time: each model has its own queue and daemon.
    threads = [threading.Thread(target=ask, args=(name,)) for name in ("gemma3-270m",
                                                                        "qwen3-test")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert {name: r.model for name, r in results.items()} == {
        "gemma3-270m": "gemma3-270m", "qwen3-test": "qwen3-test"}
    # The prompts went through each model's own template and vocabulary.
    gemma_usage, qwen_usage = results["gemma3-270m"].usage, results["qwen3-test"].usage
    assert gemma_usage is not None and qwen_usage is not None
    assert gemma_usage.prompt_tokens != qwen_usage.prompt_tokens


def test_an_unknown_model_is_a_404_naming_the_available_ones(two_models: LucernaServer) -> None:
    client = openai.OpenAI(base_url=f"{two_models.base_url}/v1", api_key="unused",
                           max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="qwen3", messages=MESSAGES)  # type: ignore[arg-type]
    assert missing.value.code == "model_not_found"
    assert "gemma3-270m" in missing.value.message and "qwen3-test" in missing.value.message
    # With several models, leaving `model` out is not a guess at one of them.
    response = httpx.post(f"{two_models.base_url}/v1/chat/completions",
                          json={"messages": MESSAGES})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_other_dialects_route_and_refuse_the_same_way(two_models: LucernaServer) -> None:
    claude = anthropic.Anthropic(base_url=two_models.base_url, api_key="unused", max_retries=0)
    reply = claude.messages.create(model="qwen3-test", max_tokens=2, messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.model == "qwen3-test"
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="qwen3", max_tokens=2, messages=MESSAGES)  # type: ignore[arg-type]
    assert missing.value.body["type"] == "error"  # type: ignore[index]
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    completion = httpx.post(f"{two_models.base_url}/v1/completions", timeout=60, json={
        "model": "gemma3-270m", "prompt": "The lamp", "max_tokens": 2})
    assert completion.status_code == 200
    assert completion.json()["model"] == "gemma3-270m"
