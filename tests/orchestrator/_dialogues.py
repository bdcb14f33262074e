"""One tool-use conversation, spelled in each dialect, for the live dialect tests.

Two finished weather look-ups teach even the base default model the call syntax
in context, so its greedy reply to the third question is a call to
``get_weather`` with ``{"city": "Oslo"}``: the unforced (``tool_choice`` auto) path
end to end. Forced calls need no examples; the grammar makes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from anthropic.types import MessageParam
from anthropic.types import ToolParam as AnthropicToolParam
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from tests.conftest import LucernaServer

MODEL = "gemma3-270m"
# Past the default model's training context (32,768 tokens), so past what one request
# may hold whatever the server's parallel: with several sequences a request may use the
# whole KV pool, n_ctx x parallel, up to that context (docs/batching.md).
TOO_LONG = "lamp " * 40_000
CITIES = ("Paris", "Rome")
QUESTION = "What is the weather in Oslo?"
EXPECTED_ARGUMENTS = {"city": "Oslo"}
RESULT = "Sunny, 20 C"

PARAMETERS: dict[str, Any] = {
    "type": "object",
    # maxLength keeps a weak model's forced string short enough to finish in a test.
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
}
DESCRIPTION = "Current weather for a city"

CHAT_TOOLS: list[ChatCompletionFunctionToolParam] = [{
    "type": "function",
    "function": {"name": "get_weather", "description": DESCRIPTION, "parameters": PARAMETERS}}]
# Plain dicts: the SDK's FunctionToolParam requires "strict", which these requests leave out.
RESPONSES_TOOLS: list[dict[str, Any]] = [{"type": "function", "name": "get_weather",
                                          "description": DESCRIPTION, "parameters": PARAMETERS}]
ANTHROPIC_TOOLS: list[AnthropicToolParam] = [{"name": "get_weather", "description": DESCRIPTION,
                                              "input_schema": PARAMETERS}]


def openai_client(server: LucernaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def check_openai_errors(create: Callable[..., Any], prompt_key: str) -> None:
    """An unknown model is a 404 ``model_not_found``; an over-long prompt is a fast 400
    ``context_length_exceeded`` (streaming or not, before any SSE header)."""
    with pytest.raises(openai.NotFoundError) as missing:
        create(model="no-such-model", **{prompt_key: "Hi"})
    assert missing.value.code == "model_not_found"
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as too_long:
            create(model=MODEL, stream=stream, **{prompt_key: TOO_LONG})
        assert too_long.value.code == "context_length_exceeded"


def chat_messages() -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = []
    for i, city in enumerate(CITIES):
        messages += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{i}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": RESULT},
            {"role": "assistant", "content": f"It is sunny in {city}."},
        ]
    return [*messages, {"role": "user", "content": QUESTION}]


def responses_input() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i, city in enumerate(CITIES):
        items += [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": f"What is the weather in {city}?"}]},
            {"type": "function_call", "call_id": f"call_{i}", "name": "get_weather",
             "arguments": json.dumps({"city": city})},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": RESULT},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": f"It is sunny in {city}."}]},
        ]
    return [*items, {"role": "user", "content": QUESTION}]


def anthropic_messages() -> list[MessageParam]:
    messages: list[MessageParam] = []
    for i, city in enumerate(CITIES):
        messages += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather",
                 "input": {"city": city}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": RESULT}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"It is sunny in {city}."}]},
        ]
    return [*messages, {"role": "user", "content": QUESTION}]
