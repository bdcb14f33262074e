"""Legacy Completions (``/v1/completions``) end to end, the ``openai`` client as the oracle."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import MODEL, check_openai_errors, openai_client

PROMPT = "The capital of France is"
# A transcript in the fallback template's own format: a raw completion continues it
# freely, since no chat template (and so none of its stop strings) applies.
TRANSCRIPT = "User: a\nAssistant: b\nUser: c\nAssistant: d\nUser: e\nAssistant: f"


def test_stream_and_non_stream_agree(server: LucernaServer) -> None:
    client = openai_client(server)
    plain = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0)
    assert plain.object == "text_completion" and plain.id.startswith("cmpl-")
    choice = plain.choices[0]
    assert choice.text and choice.logprobs is None
    # max_tokens defaults to 16, as in the spec.
    assert choice.finish_reason == "length" and plain.usage is not None
    assert plain.usage.completion_tokens == 16
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + 16

    chunks = list(client.completions.create(model=MODEL, prompt=[PROMPT], temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1
    assert all(c.object == "text_completion" for c in chunks)
    *texts, usage = chunks
    assert usage.choices == [] and usage.usage is not None
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [getattr(usage.usage, k) for k in counts] == [getattr(plain.usage, k) for k in counts]
    # The same prompt again: its state came from the prefix cache.
    assert usage.usage.prompt_tokens_details is not None
    assert (usage.usage.prompt_tokens_details.cached_tokens or 0) > 0
    assert all(c.usage is None for c in texts)
    assert "".join(c.choices[0].text for c in texts) == choice.text
    assert [c.choices[0].finish_reason for c in texts][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in texts[:-1])


def test_raw_prompt_gets_no_template_stops_and_honours_its_own(server: LucernaServer) -> None:
    client = openai_client(server)
    free = client.completions.create(model=MODEL, prompt=TRANSCRIPT, max_tokens=12,
                                     temperature=0).choices[0]
    assert "\nUser:" in free.text
    stopped = client.completions.create(model=MODEL, prompt=TRANSCRIPT, max_tokens=12,
                                        temperature=0, stop=["\nUser:"]).choices[0]
    assert stopped.text == free.text[: free.text.index("\nUser:")]
    assert stopped.finish_reason == "stop"


def test_token_id_prompt(server: LucernaServer) -> None:
    ids = [2, 818, 5279, 529]
    response = openai_client(server).completions.create(model=MODEL, prompt=ids, max_tokens=3,
                                                        temperature=0)
    assert response.usage is not None and response.usage.prompt_tokens == len(ids)
    assert response.usage.completion_tokens == 3


@pytest.mark.parametrize(("fields", "param"), [
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["one", "two"]}, "prompt"),
    ({"prompt": [1 << 40]}, "prompt"),
    ({"logprobs": 21}, "logprobs"),
    ({"logprobs": -1}, "logprobs"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"stop": [1, 2]}, "stop"),
])
def test_bad_fields_are_400_with_their_param(
    server: LucernaServer, fields: dict[str, Any], param: str,
) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(server).completions.create(**{"model": MODEL, "prompt": PROMPT, **fields})
    assert bad.value.param == param
    assert bad.value.type == "invalid_request_error"


def test_unknown_model_and_context_overflow(server: LucernaServer) -> None:
    check_openai_errors(openai_client(server).completions.create, "prompt")
