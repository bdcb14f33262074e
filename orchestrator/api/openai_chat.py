"""OpenAI Chat Completions: ``POST /v1/chat/completions``, streaming and not.

Wire shapes follow the OpenAI OpenAPI spec as the official ``openai`` client
parses them (see shared/reference/api-conformance.md §1.2): constant ``id`` /
``created`` / ``model`` across chunks, the first delta carries the role, exactly
one non-null ``finish_reason``, the usage chunk (``stream_options.include_usage``)
has ``choices: []`` and comes before ``data: [DONE]``, and a failure after the
headers went out is ``data: {"error": ...}`` followed by ``data: [DONE]``.

A tool call is streamed as one delta pair: ``{index, id, type, function: {name,
arguments: ""}}`` and then ``{index, function: {arguments: <the whole JSON>}}``.
The SDK's stream helper concatenates every string field of later deltas, so ``id``
and ``name`` appear only in the first (§0.2).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.api import _fields as fields
from orchestrator.api._dialect import chat_generation, new_id
from orchestrator.api._generation import run_generation
from orchestrator.api._http import read_json_body
from orchestrator.api._logprobs import chat_entry, chat_logprobs
from orchestrator.api._openai import OpenAIEnvelope, include_usage
from orchestrator.api._tool_fields import read_response_format, read_tool_choice, read_tools
from orchestrator.errors import BadRequestError
from orchestrator.events import (
    Event,
    Finished,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
)
from orchestrator.keepalive import KeepAlive
from orchestrator.models import ModelRegistry
from orchestrator.reasoning import ReasoningControl
from orchestrator.tools import OutputPlan, plan_output

__all__ = ["ChatRequest", "chat_completions", "parse_chat_request"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True)
class ChatRequest:
    basics: fields.Basics
    messages: list[dict[str, Any]]
    include_usage: bool
    output: OutputPlan
    logprobs: int | None = None  # top_logprobs when logprobs: true
    reasoning: ReasoningControl | None = None  # reasoning_effort


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("messages must be a non-empty array", param="messages")
    result: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequestError(f"messages[{i}] must be an object", param="messages")
        role = message.get("role")
        if role not in _ROLES:
            raise BadRequestError(
                f"messages[{i}].role must be one of {', '.join(sorted(_ROLES))}, got {role!r}",
                param="messages",
            )
        # Templates know "system"; OpenAI's newer "developer" role means the same.
        result.append({**message, "role": "system" if role == "developer" else role})
    return result


def parse_chat_request(body: Mapping[str, Any]) -> ChatRequest:
    n = fields.integer(body, "n", 1, 128)
    if n not in (None, 1):
        raise BadRequestError("only n=1 is supported", param="n")
    basics = fields.basics(body, max_tokens=("max_completion_tokens", "max_tokens"))
    return ChatRequest(
        basics=basics,
        messages=_messages(body),
        include_usage=include_usage(body, basics.stream),
        output=plan_output(read_tools(body, "chat"), read_tool_choice(body, "chat"),
                           read_response_format(body.get("response_format"),
                                                "response_format")),
        logprobs=chat_logprobs(body),
        reasoning=fields.reasoning_effort(fields.string(body, "reasoning_effort"),
                                          "reasoning_effort"),
    )


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _deltas(event: TextDelta | ReasoningDelta | ToolCall,
            indices: Iterator[int]) -> list[dict[str, Any]]:
    if isinstance(event, TextDelta):
        return [{"content": event.text}]
    if isinstance(event, ReasoningDelta):  # llama-server's and DeepSeek's field
        return [{"reasoning_content": event.text}]
    index = next(indices)
    return [
        {"tool_calls": [{"index": index, "id": event.id, "type": "function",
                         "function": {"name": event.name, "arguments": ""}}]},
        {"tool_calls": [{"index": index, "function": {"arguments": event.arguments}}]},
    ]


def _choice(finish_reason: str | None, logprobs: list[TokenLogprob] | None = None,
            **content: Any) -> dict[str, Any]:
    shown = None if logprobs is None else {"content": [chat_entry(lp) for lp in logprobs],
                                           "refusal": None}
    return {"index": 0, **content, "logprobs": shown, "finish_reason": finish_reason}


async def chat_completions(request: Request, registry: ModelRegistry) -> Response:
    chat = parse_chat_request(await read_json_body(request))
    model = registry.get(chat.basics.model)
    envelope = OpenAIEnvelope(new_id("chatcmpl-"), model.name, chat.include_usage)

    async def build() -> GenerationRequest:
        generation = await chat_generation(model, chat.messages, chat.output, chat.basics,
                                           chat.reasoning)
        return dataclasses.replace(generation, logprobs=chat.logprobs)

    def to_response(generation: GenerationRequest, events: list[Event]) -> Response:
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        calls = [_tool_call(e) for e in events if isinstance(e, ToolCall)]
        finished = next(e for e in events if isinstance(e, Finished))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:  # a reply that is only calls has null content, as OpenAI's
            message.update(content=text or None, tool_calls=calls)
        logprobs = (None if chat.logprobs is None
                    else [e for e in events if isinstance(e, TokenLogprob)])
        return JSONResponse(envelope.body(
            "chat.completion", [_choice(finished.finish_reason, logprobs, message=message)],
            finished))

    def to_sse(generation: GenerationRequest,
               events: AsyncIterator[Event | KeepAlive]) -> AsyncGenerator[bytes, None]:
        indices = itertools.count()  # tool calls are numbered across the whole reply
        pending: list[TokenLogprob] = []  # tokens whose text has not gone out yet

        def taken() -> list[TokenLogprob] | None:
            if chat.logprobs is None:
                return None
            out = pending.copy()
            pending.clear()
            return out

        def choices(event: TextDelta | ReasoningDelta | ToolCall | TokenLogprob
                    ) -> list[dict[str, Any]]:
            if isinstance(event, TokenLogprob):
                pending.append(event)
                return []
            return [_choice(None, taken() if i == 0 else None, delta=d)
                    for i, d in enumerate(_deltas(event, indices))]

        return envelope.stream(
            "chat.completion.chunk", events,
            choices=choices,
            last=lambda finished: _choice(finished.finish_reason, taken() or None, delta={}),
            first=_choice(None, delta={"role": "assistant", "content": ""}),
        )

    return await run_generation(request, model, build, stream=chat.basics.stream, to_sse=to_sse,
                                to_response=to_response)
