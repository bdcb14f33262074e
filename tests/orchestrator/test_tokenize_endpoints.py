"""llama-server's ``POST /tokenize`` and ``POST /detokenize`` on the daemons' tokenizers.

The server is a real ``lucerna serve --config`` with two models behind an API key
(the default gemma3-270m, which adds a BOS, and the qwen3 test model, a different
vocabulary), so ``model`` has to pick the tokenizer.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import LucernaServer
from tests.orchestrator.conftest import GEMMA, PAIR_KEY, QWEN

AUTH = {"Authorization": f"Bearer {PAIR_KEY}"}
TEXT = "Hello world, the lamp is lit."


@pytest.fixture
def served(keyed_pair: LucernaServer) -> LucernaServer:
    return keyed_pair


def post(server: LucernaServer, path: str, body: Any,
         headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body,
                      headers=AUTH if headers is None else headers, timeout=60)


def tokenize(server: LucernaServer, **body: Any) -> Any:
    response = post(server, "/tokenize", body)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def detokenize(server: LucernaServer, tokens: list[int], model: str = GEMMA) -> str:
    response = post(server, "/detokenize", {"tokens": tokens, "model": model})
    assert response.status_code == 200, response.text
    content: str = response.json()["content"]
    return content


def bos(server: LucernaServer, model: str) -> int:
    props = httpx.get(f"{server.base_url}/props", params={"model": model}, headers=AUTH).json()
    return tokenize(server, content=props["bos_token"], model=model)[0]  # type: ignore[no-any-return]


def test_tokenize_matches_what_generation_counts(served: LucernaServer) -> None:
    plain = tokenize(served, content=TEXT, model=GEMMA)
    special = tokenize(served, content=TEXT, model=GEMMA, add_special=True)
    assert plain and all(isinstance(t, int) for t in plain)
    # gemma3 asks for a BOS: add_special adds exactly it, in front.
    assert special == [bos(served, GEMMA), *plain]
    # The raw-prompt completion tokenizes the same text the same way.
    completion = post(served, "/v1/completions", {"model": GEMMA, "prompt": TEXT,
                                                  "max_tokens": 1, "temperature": 0})
    assert completion.status_code == 200, completion.text
    assert completion.json()["usage"]["prompt_tokens"] == len(special)


def test_round_trip_and_control_tokens(served: LucernaServer) -> None:
    for model in (GEMMA, QWEN):
        assert detokenize(served, tokenize(served, content=TEXT, model=model), model) == TEXT
    # Control-token text parses to its token and renders back, as llama-server does.
    turn = "<start_of_turn>user\nHi<end_of_turn>"
    ids = tokenize(served, content=turn, model=GEMMA)
    assert len(ids) < len(turn) // 2
    assert detokenize(served, ids) == turn
    assert detokenize(served, tokenize(served, content=TEXT, model=GEMMA,
                                       add_special=True)) == "<bos>" + TEXT


def test_model_picks_the_vocabulary(served: LucernaServer) -> None:
    gemma = tokenize(served, content=TEXT, model=GEMMA)
    qwen = tokenize(served, content=TEXT, model=QWEN)
    assert gemma != qwen
    # qwen3 asks for no BOS, so add_special adds nothing there.
    assert tokenize(served, content=TEXT, model=QWEN, add_special=True) == qwen
    assert detokenize(served, qwen, QWEN) == TEXT


def test_with_pieces_gives_each_tokens_text_or_bytes(served: LucernaServer) -> None:
    # "🦫" is not one token of either vocabulary: some pieces are partial UTF-8.
    text = "Hi 🦫 there"
    for model in (GEMMA, QWEN):
        ids = tokenize(served, content=text, model=model)
        pieces = tokenize(served, content=text, model=model, with_pieces=True)
        assert [p["id"] for p in pieces] == ids
        assert any(isinstance(p["piece"], list) for p in pieces), pieces
        joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str)
                          else bytes(p["piece"]) for p in pieces)
        assert joined == text.encode()
    special = tokenize(served, content="A", model=GEMMA, with_pieces=True, add_special=True)
    assert special[0] == {"id": bos(served, GEMMA), "piece": "<bos>"}


def test_empty_input(served: LucernaServer) -> None:
    assert tokenize(served, content="", model=GEMMA) == []
    assert tokenize(served, content="", model=GEMMA, add_special=True) == [bos(served, GEMMA)]
    assert detokenize(served, []) == ""


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/tokenize", {"model": GEMMA}, "content"),
    ("/tokenize", {"model": GEMMA, "content": ["Hi"]}, "content"),
    ("/tokenize", {"model": GEMMA, "content": "Hi", "add_special": 1}, "add_special"),
    ("/tokenize", {"model": GEMMA, "content": "Hi", "with_pieces": "yes"}, "with_pieces"),
    ("/tokenize", {"model": GEMMA, "content": "Hi", "parse_special": False}, "parse_special"),
    ("/tokenize", {"model": 3, "content": "Hi"}, "model"),
    ("/detokenize", {"model": GEMMA}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": "1 2"}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": [1, "2"]}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": [1, True]}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": [1.0]}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": [-1]}, "tokens"),
    ("/detokenize", {"model": GEMMA, "tokens": [2, 262144]}, "tokens"),
])
def test_bad_input_is_a_400(served: LucernaServer, path: str, body: dict[str, Any],
                            param: str) -> None:
    response = post(served, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert error["message"]


def test_body_must_be_a_json_object(served: LucernaServer) -> None:
    for path in ("/tokenize", "/detokenize"):
        response = httpx.post(f"{served.base_url}{path}", content=b"{not json", headers=AUTH)
        assert response.status_code == 400
        assert "not valid JSON" in response.json()["error"]["message"]
        assert post(served, path, ["Hi"]).status_code == 400


def test_model_is_named_where_several_are_served(served: LucernaServer) -> None:
    for path, body in (("/tokenize", {"content": "Hi"}), ("/detokenize", {"tokens": [1]})):
        response = post(served, path, body)
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "model_not_found" and error["param"] == "model"
        assert GEMMA in error["message"] and QWEN in error["message"]
        unknown = post(served, path, {**body, "model": "qwen3"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"


def test_both_need_the_key(served: LucernaServer) -> None:
    for path, body in (("/tokenize", {"content": "Hi", "model": GEMMA}),
                       ("/detokenize", {"tokens": [1], "model": GEMMA})):
        refused = post(served, path, body, headers={})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert post(served, path, body, headers={"Authorization": "Bearer wrong"}
                    ).status_code == 401
        assert post(served, path, body, headers={"x-api-key": PAIR_KEY}).status_code == 200
