"""Chat Completions with tools and structured output, the ``openai`` client as the oracle.

Unforced calls come from the in-context examples in ``_dialogues``; forced calls
and ``response_format`` rely on the daemon constraining decoding with the request's
JSON schema. (Which schema each choice produces, ``required``'s ``anyOf`` and
``json_object``'s included, is checked without a model in test_tools_parser.py.)
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pydantic
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam

from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import (
    CHAT_TOOLS,
    EXPECTED_ARGUMENTS,
    MODEL,
    QUESTION,
    chat_messages,
    openai_client,
)

ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def test_unforced_call_accumulates_in_the_stream_helper(server: LucernaServer) -> None:
    client = openai_client(server)
    with client.chat.completions.stream(model=MODEL, messages=chat_messages(),
                                        tools=CHAT_TOOLS, max_tokens=40, temperature=0) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == EXPECTED_ARGUMENTS
    assert [(e.name, e.index, e.arguments) for e in done] == [
        ("get_weather", 0, call.function.arguments)]

    plain = client.chat.completions.create(model=MODEL, messages=chat_messages(),
                                           tools=CHAT_TOOLS, max_tokens=40, temperature=0)
    [plain_call] = plain.choices[0].message.tool_calls or []
    assert isinstance(plain_call, ChatCompletionMessageFunctionToolCall)
    assert plain.choices[0].finish_reason == "tool_calls"
    assert plain.choices[0].message.content is None
    assert (plain_call.function.name, plain_call.function.arguments) == (
        call.function.name, call.function.arguments)


def test_forced_function_is_called_even_by_a_weak_model(server: LucernaServer) -> None:
    # Waits on json_schema reaching the daemon's grammar.
    client = openai_client(server)
    with client.chat.completions.stream(
        model=MODEL, messages=ASK, tools=CHAT_TOOLS, max_tokens=48,
        temperature=0, tool_choice={"type": "function", "function": {"name": "get_weather"}},
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    [call] = final.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments["city"], str) and set(arguments) == {"city"}
    assert not final.choices[0].message.content


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    population: int


def test_response_format_json_schema_parses_into_the_model(server: LucernaServer) -> None:
    # Waits on json_schema reaching the daemon's grammar.
    completion = openai_client(server).chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Describe Oslo."}],
        response_format=City, max_tokens=64, temperature=0)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City)


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": CHAT_TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": CHAT_TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
    ({"tools": {"get_weather": {}}}, "tools"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "messages"),
])
def test_bad_tool_fields_are_400_with_their_param(
    server: LucernaServer, fields: dict[str, Any], param: str,
) -> None:
    body = {"model": MODEL, "messages": ASK, "max_tokens": 4, **fields}
    response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param

