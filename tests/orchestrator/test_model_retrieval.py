"""``GET /v1/models`` and ``GET /v1/models/{id}`` as the openai and anthropic SDKs read them.

The server is a real ``lucerna serve --config`` with two models behind an API key:
the default gemma3-270m and the qwen3 test model under an id with a slash, as
Hugging Face style ids have.
"""

from __future__ import annotations

import datetime

import anthropic
import httpx
import openai
import pytest

from tests.conftest import LucernaServer
from tests.orchestrator.conftest import GEMMA, PAIR_KEY, PAIR_N_CTX, QWEN

KEY, N_CTX = PAIR_KEY, PAIR_N_CTX
IDS = [GEMMA, QWEN]


@pytest.fixture
def served(keyed_pair: LucernaServer) -> LucernaServer:
    return keyed_pair


def openai_client(server: LucernaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEY, max_retries=0)


def claude_client(server: LucernaServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0)


def test_openai_sdk_lists_and_retrieves_each_model(served: LucernaServer) -> None:
    client = openai_client(served)
    listed = client.models.list()
    assert [m.id for m in listed] == IDS
    for entry in listed:
        model = client.models.retrieve(entry.id)
        assert (model.id, model.object, model.owned_by, model.created) == (
            entry.id, "model", "lucerna", entry.created)
        assert isinstance(model.created, int) and model.created > 0


def test_anthropic_sdk_lists_and_retrieves_each_model(served: LucernaServer) -> None:
    claude = claude_client(served)
    page = claude.models.list()
    assert [m.id for m in page.data] == IDS
    assert (page.has_more, page.first_id, page.last_id) == (False, IDS[0], IDS[-1])
    for entry in page.data:
        model = claude.models.retrieve(entry.id)
        assert model == entry
        assert model.type == "model" and model.display_name == entry.id
        assert model.lifecycle == "active"
        assert isinstance(model.created_at, datetime.datetime)
        assert model.created_at.tzinfo is not None
        assert model.max_input_tokens == N_CTX
        assert model.max_tokens == N_CTX // 4  # the default output cap
    # The OpenAI view of the same model is the same entry.
    raw = httpx.get(f"{served.base_url}/v1/models/gemma3-270m",
                    headers={"Authorization": f"Bearer {KEY}"}).json()
    assert raw["id"] == "gemma3-270m" and raw["type"] == "model"
    assert datetime.datetime.fromtimestamp(raw["created"], datetime.UTC) == \
        claude.models.retrieve("gemma3-270m").created_at


def test_anthropic_sdk_pages_with_its_cursors(served: LucernaServer) -> None:
    claude = claude_client(served)
    first = claude.models.list(limit=1)
    assert [m.id for m in first.data] == IDS[:1]
    assert (first.has_more, first.first_id, first.last_id) == (True, IDS[0], IDS[0])
    assert first.has_next_page()
    # Iterating auto-pages: the SDK follows last_id with after_id until has_more is false.
    assert [m.id for m in first] == IDS
    assert [len(page.data) for page in claude.models.list(limit=1).iter_pages()] == [1, 1]
    assert [m.id for m in claude.models.list(limit=1, after_id=IDS[0]).data] == IDS[1:]
    before = claude.models.list(limit=1, before_id=IDS[1])
    assert [m.id for m in before.data] == IDS[:1] and before.has_more is False
    assert [m.id for m in claude.models.list(lifecycle=["active"]).data] == IDS
    assert claude.models.list(lifecycle=["deprecated", "retired"]).data == []


def test_unknown_models_are_404s_in_each_dialects_shape(served: LucernaServer) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client(served).models.retrieve("qwen3")
    assert missing.value.code == "model_not_found"
    assert missing.value.type == "invalid_request_error"
    assert "gemma3-270m" in missing.value.message and "test/qwen3" in missing.value.message

    with pytest.raises(anthropic.NotFoundError) as missing_too:
        claude_client(served).models.retrieve("qwen3")
    body = missing_too.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "test/qwen3" in body["error"]["message"]

    # The header the Anthropic SDK always sends is what picks the shape.
    url = f"{served.base_url}/v1/models/test/qwen3-nope"
    plain = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"})
    assert plain.status_code == 404 and plain.json()["error"]["code"] == "model_not_found"
    anthropic_style = httpx.get(url, headers={"x-api-key": KEY,
                                              "anthropic-version": "2023-06-01"})
    assert anthropic_style.status_code == 404
    assert anthropic_style.json()["type"] == "error"


def test_bad_page_queries_are_anthropic_400s(served: LucernaServer) -> None:
    claude = claude_client(served)
    for query in ({"limit": 0}, {"limit": 1001}, {"after_id": "qwen3"},
                  {"after_id": IDS[0], "before_id": IDS[1]}):
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.models.list(**query)
        body = refused.value.body
        assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error", query
    with pytest.raises(anthropic.BadRequestError):
        claude.models.list(limit=1, extra_query={"lifecycle[]": "old"})
    response = httpx.get(f"{served.base_url}/v1/models?limit=x",
                         headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "limit"


def test_retrieval_needs_the_key(served: LucernaServer) -> None:
    assert httpx.get(f"{served.base_url}/v1/models/gemma3-270m").status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="wrong",
                      max_retries=0).models.retrieve("gemma3-270m")
    # The Codex catalog is unaffected by Anthropic's paging.
    listed = httpx.get(f"{served.base_url}/v1/models?limit=1",
                       headers={"x-api-key": KEY}).json()
    assert [m["id"] for m in listed["data"]] == IDS[:1]
    assert [m["slug"] for m in listed["models"]] == IDS
