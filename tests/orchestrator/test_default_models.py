"""``bin/lucerna serve`` without arguments: the two embedded models on one listener.

The README's first curl, sent as the README writes it, gets a finished answer from the
instruct model (SmolLM2-135M-Instruct follows its ChatML template and stops), and a
request naming gemma3-270m reaches that one.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from daemons.native import NativeBuild
from daemons.paths import repo_root
from tests.conftest import LucernaServer

COLOURS = {"red", "green", "blue", "yellow", "black", "white", "pink", "purple", "orange",
           "grey", "gray", "brown"}


def readme_first_curl() -> tuple[str, dict[str, object]]:
    """The path and JSON body of the first ``curl`` in the README."""
    text = (repo_root() / "README.md").read_text()
    match = re.search(r"^curl .*?(?=^```)", text, re.S | re.M)
    assert match, "the README has no curl command"
    words = shlex.split(match.group(0).replace("\\\n", " "))
    url = next(w for w in words if w.startswith("http://"))
    body = json.loads(words[words.index("-d") + 1])
    return url.split(":8080", 1)[1], body


@pytest.fixture(scope="module")
def plain_server(native: NativeBuild, default_model: Path, chat_model: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    server = LucernaServer(tmp_path_factory.mktemp("plain") / "serve.log")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_the_readme_curl_gets_a_finished_answer_from_the_chat_model(
        plain_server: LucernaServer) -> None:
    path, body = readme_first_curl()
    assert "model" not in body  # the README relies on the default model
    reply = httpx.post(plain_server.base_url + path, json=body, timeout=120).json()
    assert reply["model"] == "smollm2-135m-instruct"
    (choice,) = reply["choices"]
    assert choice["finish_reason"] == "stop"
    words = set(re.findall(r"[a-z]+", choice["message"]["content"].lower()))
    assert len(words & COLOURS) >= 3, choice  # a sensible answer to "Name three colours."


@pytest.mark.slow
def test_both_embedded_models_are_listed_and_routed_by_name(
        plain_server: LucernaServer) -> None:
    listed = httpx.get(f"{plain_server.base_url}/v1/models").json()["data"]
    assert [(m["id"], m["meta"]["architecture"]) for m in listed] == [
        ("smollm2-135m-instruct", "llama"), ("gemma3-270m", "gemma3")]
    for name in ("gemma3-270m", "smollm2-135m-instruct"):
        reply = httpx.post(f"{plain_server.base_url}/v1/chat/completions", timeout=120, json={
            "model": name, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Name a colour."}]}).json()
        assert reply["model"] == name
    props = httpx.get(f"{plain_server.base_url}/props").json()
    assert props["model_alias"] == "smollm2-135m-instruct"  # `lucerna clients` reads this
