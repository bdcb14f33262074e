"""The Responses API (``/v1/responses``) end to end: the ``openai`` client's stream
accumulator and Response models as the oracle, plus the raw event sequence Codex reads."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseOutputMessage

from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import (
    EXPECTED_ARGUMENTS,
    MODEL,
    QUESTION,
    RESPONSES_TOOLS,
    check_openai_errors,
    openai_client,
    responses_input,
)

GREETING = "Say hi"


def test_text_stream_and_create_agree(server: LucernaServer) -> None:
    client = openai_client(server)
    with client.responses.stream(model=MODEL, input=GREETING, instructions="Be brief.",
                                 max_output_tokens=32, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas and deltas
    assert final.id.startswith("resp_") and final.status == "completed"
    message = final.output[0]
    assert isinstance(message, ResponseOutputMessage) and message.id.startswith("msg_")
    assert final.usage is not None
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens
    assert 0 <= final.usage.input_tokens_details.cached_tokens <= final.usage.input_tokens
    assert final.usage.output_tokens_details.reasoning_tokens == 0

    created = client.responses.create(model=MODEL, input=GREETING, instructions="Be brief.",
                                      max_output_tokens=32, temperature=0)
    assert created.output_text == final.output_text
    assert created.status == "completed" and created.usage is not None
    # The same tokens; the second may read its prompt from the first's cached state
    # (input_tokens counts cached ones too, as OpenAI's does).
    assert created.usage.input_tokens == final.usage.input_tokens
    assert created.usage.output_tokens == final.usage.output_tokens
    assert created.usage.input_tokens_details.cached_tokens <= created.usage.input_tokens


def test_cut_by_max_output_tokens_is_incomplete(server: LucernaServer) -> None:
    response = openai_client(server).responses.create(
        model=MODEL, input="Tell me a long story about a lamp.", max_output_tokens=3,
        temperature=0)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 3


def _sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in response.iter_lines()
            if line.startswith("data: ")]


def test_multi_turn_function_calls_stream_as_output_items(server: LucernaServer) -> None:
    body = {"model": MODEL, "input": responses_input(), "tools": RESPONSES_TOOLS,
            "max_output_tokens": 40, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=60) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(raw)
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = events[5]["item"]
    assert done["type"] == "function_call" and done["status"] == "completed"
    assert done["call_id"].startswith("call_") and done["name"] == "get_weather"
    assert json.loads(done["arguments"]) == EXPECTED_ARGUMENTS
    assert events[2]["item"]["id"] == events[3]["item_id"] == done["id"]
    assert events[-1]["response"]["output"] == [done]

    # The same conversation through the SDK's accumulator and Response model. (Plain dicts:
    # the SDK's input and tool types do not describe every item the API takes.)
    with openai_client(server).responses.stream(
        model=MODEL, input=responses_input(), tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
        max_output_tokens=40, temperature=0,
    ) as stream:
        final = stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == EXPECTED_ARGUMENTS


def test_forced_function_call(server: LucernaServer) -> None:
    # Waits on json_schema reaching the daemon's grammar.
    response = openai_client(server).responses.create(  # type: ignore[call-overload]
        model=MODEL, input=QUESTION, tools=RESPONSES_TOOLS,
        tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=48,
        temperature=0)
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert response.status == "completed"


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": []}, "input"),
    ({"input": [{"type": "image_generation_call"}]}, "input"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": RESPONSES_TOOLS},
     "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "schema": "no"}}}, "text.format"),
])
def test_bad_fields_are_400_with_their_param(
    server: LucernaServer, fields: dict[str, Any], param: str,
) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(server).responses.create(**{"model": MODEL, "input": GREETING, **fields})
    assert bad.value.param == param


def test_unknown_model_and_context_overflow(server: LucernaServer) -> None:
    check_openai_errors(openai_client(server).responses.create, "input")
