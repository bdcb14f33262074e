"""Prompt lookup through the server: the ``lookup`` setting, the request's ``lookup``
field, ``usage`` and ``/props`` (PROTOCOL.md 5.9).

That lookup gives autoregressive tokens is the native tests' to prove, with the setting
that makes it hold (tests/native/test_prompt_lookup.py); these prove the plumbing. One
server, two models on the qwen3 test model: ``plain`` (lookup off, the default) and
``lookup`` (``opt-in``, with matches of one token so that the random weights give
proposals to verify).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

PROMPT = "lamp lamp lamp lamp lamp lamp lamp lamp"


@pytest.fixture(scope="module")
def server(native: NativeBuild, test_models: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("lookup")
    config = folder / "lucerna.toml"
    config.write_text(f"""
[[models]]
name = "plain"
path = "{test_models['qwen3']}"

[[models]]
name = "lookup"
path = "{test_models['qwen3']}"
lookup = "opt-in"
extra_args = ["--lookup-min=1"]
""")
    served = LucernaServer(folder / "serve.log", "--config", str(config), "--n-ctx", "512",
                           "--threads", "1")
    try:
        served.wait_healthy()
        yield served
    finally:
        served.stop()


def complete(server: LucernaServer, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/completions", timeout=120, json={
        "model": model, "prompt": PROMPT, "max_tokens": 24, "temperature": 0, **extra})


def test_props_say_how_each_model_speculates(server: LucernaServer) -> None:
    for model, lookup in (("plain", "off"), ("lookup", "opt-in")):
        props = httpx.get(f"{server.base_url}/props", params={"model": model}).json()
        assert props["speculation"]["lookup"] == lookup
        assert props["speculation"]["draft"] is None
    props = httpx.get(f"{server.base_url}/props", params={"model": "lookup"}).json()
    assert props["speculation"]["block"] == 16  # the running daemon's draft_block


def test_a_request_opts_in_and_usage_reports_it(server: LucernaServer) -> None:
    asked = complete(server, "lookup", lookup=True)
    assert asked.status_code == 200, asked.text
    spec = asked.json()["usage"]["speculative"]
    assert spec["method"] == "lookup"
    assert spec["draft_steps"] > 0 and 0 <= spec["accepted"] <= spec["proposed"]
    # Not asked (opt-in): no proposer ran, so usage has nothing to say, and the tokens are
    # the plain model's bit for bit (a step without proposals is autoregressive decoding).
    for body in ({}, {"lookup": False}):
        quiet = complete(server, "lookup", **body).json()
        assert "speculative" not in quiet["usage"]
        plain = complete(server, "plain", **body).json()
        assert quiet["choices"][0]["text"] == plain["choices"][0]["text"]
    chat = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=120, json={
        "model": "lookup", "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 16, "temperature": 0, "lookup": True})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["speculative"]["method"] == "lookup"


def test_a_model_without_lookup_refuses_the_opt_in(server: LucernaServer) -> None:
    refused = complete(server, "plain", lookup=True)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "lookup"
    assert 'lookup = "opt-in"' in refused.json()["error"]["message"]
    wrong = complete(server, "lookup", lookup="yes")
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "lookup"
