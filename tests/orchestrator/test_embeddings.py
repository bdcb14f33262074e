"""``POST /v1/embeddings`` (issue 20 item 3), the ``openai`` client as the oracle.

The default model's mean-pooled hidden states (``lucerna serve --embeddings``): no small
embedding GGUF ships as a package (orchestrator/api/embeddings.py says why), so these
check the endpoint's contract, not retrieval quality.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from daemons.native import NativeBuild
from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import MODEL, openai_client

TEXTS = ["a red apple", "the stock market fell", "a green apple"]


@pytest.fixture(scope="module")
def embed_server(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    srv = LucernaServer(tmp_path_factory.mktemp("embed") / "serve.log", "--model", "default",
                        "--n-ctx", "512", "--embeddings")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def vectors(response: openai.types.CreateEmbeddingResponse) -> np.ndarray:
    assert [d.index for d in response.data] == list(range(len(response.data)))
    return np.array([d.embedding for d in response.data])


def test_shapes_batching_and_determinism(embed_server: LucernaServer) -> None:
    client = openai_client(embed_server)
    batch = client.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64
    rows = vectors(batch)
    assert rows.shape == (3, 640) and batch.model == MODEL and batch.object == "list"
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    assert math.isclose(float(rows[0] @ rows[0]), 1.0, abs_tol=1e-6)  # cosine with itself
    for index, text in enumerate(TEXTS):  # one at a time: the same vectors
        alone = vectors(client.embeddings.create(model=MODEL, input=text,
                                                 encoding_format="float"))
        assert np.array_equal(alone[0].astype("<f4"), rows[index].astype("<f4"))
    again = vectors(client.embeddings.create(model=MODEL, input=TEXTS))
    assert np.array_equal(again, rows)
    # Token ids and lists of them; usage counts the ids (the model adds its BOS to text).
    ids = httpx.post(f"{embed_server.base_url}/tokenize",
                     json={"content": TEXTS[0], "add_special": True}).json()["tokens"]
    by_ids = client.embeddings.create(model=MODEL, input=ids)
    assert np.array_equal(vectors(by_ids)[0], rows[0])
    assert by_ids.usage.prompt_tokens == by_ids.usage.total_tokens == len(ids)
    two = client.embeddings.create(model=MODEL, input=[ids, ids[:2]])
    assert np.array_equal(vectors(two)[0], rows[0]) and two.usage.prompt_tokens == len(ids) + 2
    # dimensions: the first N values, normalized again.
    short = vectors(client.embeddings.create(model=MODEL, input=TEXTS, dimensions=64))
    cut = rows[:, :64] / np.linalg.norm(rows[:, :64], axis=1, keepdims=True)
    assert short.shape == (3, 64) and np.allclose(short, cut, atol=1e-6)


def test_float_and_base64_agree(embed_server: LucernaServer) -> None:
    def post(encoding: str) -> list[object]:
        response = httpx.post(f"{embed_server.base_url}/v1/embeddings", json={
            "model": MODEL, "input": TEXTS[:2], "encoding_format": encoding}, timeout=60)
        assert response.status_code == 200, response.text
        return [d["embedding"] for d in response.json()["data"]]

    floats = np.array(post("float"), dtype="<f4")
    decoded = np.array([np.frombuffer(base64.b64decode(str(b)), dtype="<f4")
                        for b in post("base64")])
    assert np.array_equal(floats, decoded)


def test_a_conversation_survives_an_embedding(embed_server: LucernaServer) -> None:
    """embed clears the daemon's live sequence: the prefix cache keeps the conversation
    in a slot first, and the next turn is what it is after any other conversation came
    between (the prefix cache's path; a cut or restore may round a near-tie of this Q4
    model differently from an uninterrupted run, PROTOCOL.md 5.10)."""
    client = openai_client(embed_server)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Count to five. " * 20}]

    def turn() -> str:
        reply = client.chat.completions.create(model=MODEL, messages=messages,
                                               max_tokens=6, temperature=0)
        return reply.choices[0].message.content or ""

    def slots() -> int:
        props = httpx.get(f"{embed_server.base_url}/props").json()
        return int(props["prefix_cache"]["ram_entries"])

    messages += [{"role": "assistant", "content": turn()}, {"role": "user", "content": "Again."}]
    turn()
    before = slots()
    client.embeddings.create(model=MODEL, input=TEXTS)
    assert slots() == before + 1  # the live conversation, snapshotted before the clear
    after_embedding = turn()
    client.chat.completions.create(model=MODEL, max_tokens=2, temperature=0, messages=[
        {"role": "user", "content": "Another conversation altogether. " * 8}])
    assert turn() == after_embedding


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": [1, "a"]}, "input"),
    ({"input": ["a"] * 2049}, "input"),
    ({"input": [10**9]}, "input"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "dimensions": 641}, "dimensions"),
    ({"input": "a " * 600}, "input"),
])
def test_bad_requests_are_400s(embed_server: LucernaServer, fields: dict[str, object],
                               param: str) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(embed_server).embeddings.create(model=MODEL, **fields)  # type: ignore[arg-type]
    assert bad.value.param == param and bad.value.type == "invalid_request_error"


def test_a_model_not_configured_for_embeddings_is_a_400(server: LucernaServer) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(server).embeddings.create(model=MODEL, input="a")
    assert bad.value.param == "model" and "not configured for embeddings" in bad.value.message


def test_unknown_model_is_a_404(embed_server: LucernaServer) -> None:
    with pytest.raises(openai.NotFoundError):
        openai_client(embed_server).embeddings.create(model="nope", input="a")




def test_the_config_key_and_the_flag() -> None:
    from orchestrator.config import Overrides, apply_overrides, parse_config
    from orchestrator.errors import ConfigError

    config = parse_config({"models": [{"name": "m", "path": "default", "embeddings": "last"}]})
    assert config.models[0].embeddings == "last"
    assert parse_config({"models": [{"name": "m", "path": "default"}]}).models[0].embeddings \
        is None
    with pytest.raises(ConfigError, match=r"models\[0\] \(m\)\.embeddings: unknown pooling 'cls'"):
        parse_config({"models": [{"name": "m", "path": "default", "embeddings": "cls"}]})
    assert apply_overrides(None, Overrides(embeddings="mean")).models[0].embeddings == "mean"
