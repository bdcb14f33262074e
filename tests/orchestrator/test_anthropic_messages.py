"""Anthropic Messages (``/v1/messages``, ``/v1/messages/count_tokens``) end to end, the
``anthropic`` client's stream accumulator and models as the oracle."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, TextBlock, TextBlockParam, ToolUseBlock, Usage

from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import (
    ANTHROPIC_TOOLS,
    EXPECTED_ARGUMENTS,
    MODEL,
    QUESTION,
    TOO_LONG,
    anthropic_messages,
)

GREEDY = {"temperature": 0}
HI: list[MessageParam] = [{"role": "user", "content": "Say hi"}]
SYSTEM: list[TextBlockParam] = [{"type": "text", "text": "Be brief."}]


def client_for(server: LucernaServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


def test_text_stream_and_create_agree(server: LucernaServer) -> None:
    client = client_for(server)
    with client.messages.stream(model=MODEL, system=SYSTEM, messages=HI,
                                max_tokens=32, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    first = final.content[0]
    assert text and isinstance(first, TextBlock) and first.text == text
    assert final.stop_reason == "end_turn" and final.id.startswith("msg_")
    created = client.messages.create(model=MODEL, system=SYSTEM, messages=HI,
                                      max_tokens=32, extra_body=GREEDY)
    [created_text] = created.content
    assert isinstance(created_text, TextBlock) and created_text.text == text
    # The same prompt; the second may read it from the first's cached state, which
    # Anthropic's usage counts apart from input_tokens (cache_read_input_tokens).
    def prompt_tokens(usage: Usage) -> int:
        return usage.input_tokens + (usage.cache_read_input_tokens or 0)

    assert prompt_tokens(created.usage) == prompt_tokens(final.usage)
    assert created.usage.output_tokens == final.usage.output_tokens > 0
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=HI)
    assert counted.input_tokens == prompt_tokens(created.usage)


def test_max_tokens_and_stop_sequences(server: LucernaServer) -> None:
    client = client_for(server)
    cut = client.messages.create(model=MODEL, messages=HI, max_tokens=1, extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 1
    story: list[MessageParam] = [{"role": "user", "content": "Tell me a story about a lamp."}]
    free = client.messages.create(model=MODEL, messages=story, max_tokens=12,
                                  extra_body=GREEDY)
    free_text = free.content[0]
    assert isinstance(free_text, TextBlock)
    words = free_text.text.split()
    assert len(words) >= 3
    stop = words[2]
    stopped = client.messages.create(model=MODEL, messages=story, max_tokens=12,
                                     extra_body=GREEDY, stop_sequences=[stop])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    stopped_text = stopped.content[0]
    assert isinstance(stopped_text, TextBlock)
    assert stopped_text.text == free_text.text[: free_text.text.index(stop)]


def test_tool_use_from_history_with_tool_results(server: LucernaServer) -> None:
    client = client_for(server)
    with client.messages.stream(model=MODEL, messages=anthropic_messages(),
                                tools=ANTHROPIC_TOOLS, max_tokens=40, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [block] = final.content
    assert isinstance(block, ToolUseBlock) and block.name == "get_weather"
    assert block.input == EXPECTED_ARGUMENTS
    created = client.messages.create(model=MODEL, messages=anthropic_messages(),
                                      tools=ANTHROPIC_TOOLS, max_tokens=40, extra_body=GREEDY)
    assert created.stop_reason == "tool_use"
    [created_block] = created.content
    assert isinstance(created_block, ToolUseBlock) and created_block.name == "get_weather"
    assert created_block.input == EXPECTED_ARGUMENTS


def test_forced_tool_use(server: LucernaServer) -> None:
    # Waits on json_schema reaching the daemon's grammar.
    with client_for(server).messages.stream(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}],
        tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=48, extra_body=GREEDY,
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [block] = final.content
    assert isinstance(block, ToolUseBlock) and block.name == "get_weather"
    assert isinstance(block.input["city"], str)


def test_every_event_is_named(server: LucernaServer) -> None:
    body = {"model": MODEL, "messages": HI, "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/v1/messages", json=body, timeout=60) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        frames = raw.read().decode().split("\n\n")
    named = [f.split("\n") for f in frames if f]
    assert all(lines[0].startswith("event: ") and lines[1].startswith("data: ")
               for lines in named)
    kinds = [lines[0][len("event: "):] for lines in named]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta",
                                                                     "message_stop"]
    for lines in named:
        assert f'"type": "{lines[0][len("event: "):]}"' in lines[1]


@pytest.mark.parametrize(("body", "status", "kind"), [
    ({"model": "no-such-model", "messages": HI, "max_tokens": 4}, 404, "not_found_error"),
    ({"model": MODEL, "messages": HI}, 400, "invalid_request_error"),
    ({"model": MODEL, "messages": [], "max_tokens": 4}, 400, "invalid_request_error"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image"}]}],
      "max_tokens": 4}, 400, "invalid_request_error"),
    ({"model": MODEL, "messages": HI, "max_tokens": 4, "tool_choice": {"type": "tool"}}, 400,
     "invalid_request_error"),
    ({"model": MODEL, "messages": [{"role": "user", "content": TOO_LONG}],
      "max_tokens": 4, "stream": True}, 400, "invalid_request_error"),
])
def test_errors_have_the_anthropic_shape(
    server: LucernaServer, body: dict[str, Any], status: int, kind: str,
) -> None:
    response = httpx.post(f"{server.base_url}/v1/messages", json=body, timeout=60)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert error["error"]["message"]


def test_sdk_raises_its_own_errors(server: LucernaServer) -> None:
    client = client_for(server)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", messages=HI, max_tokens=4)
    too_long: list[MessageParam] = [{"role": "user", "content": TOO_LONG}]
    with pytest.raises(anthropic.BadRequestError, match="maximum context length"):
        client.messages.create(model=MODEL, messages=too_long, max_tokens=4)
    # Counting is how a client finds out it must compact, so it counts what does not fit.
    counted = client.messages.count_tokens(model=MODEL, messages=too_long)
    assert counted.input_tokens > 2048
