"""Dialect requests mapped onto the one core, and errors in each dialect's shape: no daemon.

The app runs in-process on an empty registry (every model is unknown), which is
enough for everything that happens before a generation starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from orchestrator.api._dialect import OPENAI_ERRORS, errors_for
from orchestrator.api.anthropic_messages import ANTHROPIC_ERRORS, parse_messages_request
from orchestrator.api.openai_responses import parse_responses_request
from orchestrator.app import build_app
from orchestrator.errors import BadRequestError
from orchestrator.models import ModelRegistry
from orchestrator.tools import JsonCallParser, ToolCallParser


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(build_app(ModelRegistry([])), backend="trio") as client:
        yield client


def test_responses_items_become_hf_messages() -> None:
    parsed = parse_responses_request({
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather in "},
                         {"type": "input_text", "text": "Paris?"}]},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "21 C"},
            {"type": "function_call_output", "call_id": "c2", "output": "noon"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                  {"type": "function", "name": "get_time"},
                  {"type": "web_search"}],
        "max_output_tokens": 9,
    })
    assert parsed.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                     {"type": "input_text", "text": "Paris?"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "noon"},
    ]
    assert parsed.basics.max_tokens == 9
    assert parsed.output.parser_factory is ToolCallParser
    assert [t["function"]["name"] for t in parsed.output.template_tools or []] == [
        "get_weather", "get_time"]  # the web_search tool cannot run here: left out


def test_anthropic_turns_become_hf_messages() -> None:
    parsed = parse_messages_request({
        "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": [{"type": "text", "text": "no data"}], "is_error": True},
                {"type": "text", "text": "Try again."}]},
        ],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "max_tokens": 5,
        "stop_sequences": ["\n\n"],
    })
    assert parsed.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        # The thinking block is the turn's reasoning, for the template to write back or
        # drop (orchestrator/reasoning.py).
        {"role": "assistant", "content": "Checking.", "reasoning_content": "hm",
         "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "Error: no data"},
        {"role": "user", "content": "Try again."},
    ]
    assert parsed.basics.stop == ("\n\n",) and parsed.basics.max_tokens == 5
    assert parsed.output.parser_factory is JsonCallParser
    assert json.loads(parsed.output.json_schema or "")["properties"]["name"] == {
        "const": "get_weather"}
    with pytest.raises(BadRequestError, match="max_tokens"):
        parse_messages_request({"messages": [{"role": "user", "content": "hi"}]})
    assert parse_messages_request({"messages": [{"role": "user", "content": "hi"}]},
                                  counting=True).basics.max_tokens is None


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("path", "body", "anthropic"), [
    ("/v1/chat/completions", {"model": "x", "messages": HI}, False),
    ("/v1/completions", {"model": "x", "prompt": "hi"}, False),
    ("/v1/responses", {"model": "x", "input": "hi"}, False),
    ("/v1/messages", {"model": "x", "messages": HI, "max_tokens": 3}, True),
    ("/v1/messages/count_tokens", {"model": "x", "messages": HI}, True),
])
def test_each_dialect_answers_errors_in_its_own_shape(
    client: TestClient, path: str, body: dict[str, Any], anthropic: bool,
) -> None:
    missing = client.post(path, json=body)
    invalid = client.post(path, content=b"{not json")
    assert (missing.status_code, invalid.status_code) == (404, 400)
    if anthropic:
        assert missing.json()["error"]["type"] == "not_found_error"
        assert invalid.json()["type"] == "error"
        assert invalid.json()["error"]["type"] == "invalid_request_error"
    else:
        assert missing.json()["error"]["code"] == "model_not_found"
        assert invalid.json()["error"]["type"] == "invalid_request_error"


def test_middleware_finds_the_shape_before_routing() -> None:
    app = build_app(ModelRegistry([]))
    scope = {"type": "http", "method": "POST", "app": app, "path": "/v1/messages",
             "root_path": ""}
    assert errors_for(scope) is ANTHROPIC_ERRORS
    assert errors_for({**scope, "path": "/v1/responses"}) is OPENAI_ERRORS
    assert errors_for({**scope, "path": "/nowhere"}) is OPENAI_ERRORS
