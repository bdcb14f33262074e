"""Logprobs in the OpenAI dialects (issue 20), the ``openai`` client as the oracle.

Greedy, so the first alternative of every token is the token itself; every value is
finite and at most 0; streamed and non-streamed replies carry the same entries.
"""

from __future__ import annotations

import math
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import MODEL, openai_client

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]


def check_entries(entries: list[Any], top: int) -> None:
    assert entries
    for entry in entries:
        assert math.isfinite(entry.logprob) and entry.logprob <= 0.0
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token
        assert len(entry.top_logprobs) == top
        if not top:
            continue
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (
            entry.token, entry.logprob)
        values = [alt.logprob for alt in entry.top_logprobs]
        assert values == sorted(values, reverse=True)


def test_chat_logprobs_streamed_and_not(server: LucernaServer) -> None:
    client = openai_client(server)
    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                           max_tokens=8, logprobs=True, top_logprobs=2)
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    entries = choice.logprobs.content
    check_entries(entries, 2)
    assert reply.usage is not None and len(entries) == reply.usage.completion_tokens
    assert choice.message.content is not None
    assert choice.message.content in "".join(e.token for e in entries)

    streamed: list[Any] = []
    text = ""
    for chunk in client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                                max_tokens=8, logprobs=True, top_logprobs=2,
                                                stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == choice.message.content
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries]

    plain = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                           max_tokens=8)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == choice.message.content
    only = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                          max_tokens=8, logprobs=True)
    assert only.choices[0].logprobs is not None and only.choices[0].logprobs.content is not None
    check_entries(only.choices[0].logprobs.content, 0)


def test_completions_logprobs_and_echo(server: LucernaServer) -> None:
    client = openai_client(server)
    prompt = "The capital of France is"
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                      logprobs=3)
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs
    assert logprobs.top_logprobs is not None and logprobs.text_offset is not None
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 8
    for token, value, top in zip(logprobs.tokens, logprobs.token_logprobs,
                                 logprobs.top_logprobs, strict=True):
        assert value is not None and value <= 0.0 and len(top) <= 3
        assert max(top.values()) == value and next(iter(top)) == token
    assert logprobs.text_offset == [sum(map(len, logprobs.tokens[:i])) for i in range(8)]
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                            temperature=0, logprobs=3, stream=True))
    streamed = [t for c in chunks if c.choices[0].logprobs
                for t in c.choices[0].logprobs.tokens or []]
    assert streamed == logprobs.tokens

    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                       echo=True)
    assert echoed.choices[0].text == prompt + reply.choices[0].text
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                            temperature=0, echo=True, stream=True))
    assert chunks[0].choices[0].text == prompt
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text


def test_responses_logprobs(server: LucernaServer) -> None:
    client = openai_client(server)
    reply = client.responses.create(model=MODEL, input="Name three colours.", temperature=0,
                                    max_output_tokens=8, top_logprobs=2,
                                    include=["message.output_text.logprobs"])
    message = reply.output[0]
    assert isinstance(message, ResponseOutputMessage)
    part = message.content[0]
    assert isinstance(part, ResponseOutputText) and part.logprobs
    check_entries(part.logprobs, 2)
    deltas: list[Any] = []
    final: Any = None
    for event in client.responses.create(model=MODEL, input="Name three colours.",
                                         temperature=0, max_output_tokens=8, top_logprobs=2,
                                         include=["message.output_text.logprobs"], stream=True):
        if event.type == "response.output_text.delta":
            deltas += event.logprobs
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert [(d.token, d.logprob) for d in deltas] == [(e.token, e.logprob) for e in part.logprobs]
    assert final is not None and final.output[0].content[0].logprobs == part.logprobs
    plain = client.responses.create(model=MODEL, input="Name three colours.", temperature=0,
                                    max_output_tokens=8)
    plain_message = plain.output[0]
    assert isinstance(plain_message, ResponseOutputMessage)
    plain_part = plain_message.content[0]
    assert isinstance(plain_part, ResponseOutputText) and plain_part.logprobs == []


@pytest.mark.parametrize(("call", "fields", "param"), [
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": "yes"}, "logprobs"),
    ("responses", {"top_logprobs": 21, "include": ["message.output_text.logprobs"]},
     "top_logprobs"),
    ("responses", {"include": "message.output_text.logprobs"}, "include"),
])
def test_bad_logprobs_fields_are_400s(server: LucernaServer, call: str, fields: dict[str, Any],
                                      param: str) -> None:
    client = openai_client(server)
    with pytest.raises(openai.BadRequestError) as bad:
        if call == "chat":
            client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2,
                                           **fields)
        else:
            client.responses.create(model=MODEL, input="hi", max_output_tokens=2, **fields)
    assert bad.value.param == param and bad.value.type == "invalid_request_error"
