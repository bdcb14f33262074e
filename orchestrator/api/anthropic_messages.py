"""Anthropic Messages: ``POST /v1/messages`` (what Claude Code speaks) and
``POST /v1/messages/count_tokens``.

Requests map onto the HF message convention the templates take: ``system`` (a
string or text blocks) becomes the system message, and so do ``role: "system"``
messages in ``messages`` (Claude Code's mid-conversation updates), appended to it in
order; a user turn's ``tool_result``
blocks become ``tool`` messages (in order, before the turn's text); an assistant
turn's ``tool_use`` blocks become its ``tool_calls``; its ``thinking`` blocks become its
``reasoning_content``, which a thinking model's template writes back as it expects
(``redacted_thinking`` is dropped); images and documents are refused (text-only models).
``thinking: {"type": "enabled", "budget_tokens": N}`` is the reasoning budget (any
N >= 1 here), ``{"type": "disabled"}`` turns reasoning off (orchestrator/reasoning.py);
the reasoning comes back as a ``thinking`` block (``thinking_delta``s, then one
``signature_delta`` just before its ``content_block_stop``) before the answer.

Every SSE event carries its ``event:`` line, because the SDK dispatches on it
(§1.1): ``message_start`` → ``ping`` → per content block ``content_block_start`` /
``content_block_delta`` (``text_delta``, or one ``input_json_delta`` with the whole
input of a ``tool_use``) / ``content_block_stop``, indices 0, 1, 2… → one
``message_delta`` (``stop_reason`` ``end_turn`` / ``max_tokens`` /
``stop_sequence`` / ``tool_use``, cumulative ``usage.output_tokens``) →
``message_stop``. Failures are ``{"type": "error", "error": {type, message}}``,
as the HTTP body or, once streaming, as ``event: error``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemons.errors import DaemonsError
from orchestrator.api import _fields as fields
from orchestrator.api._dialect import ErrorShape, as_request_error, chat_generation, new_id
from orchestrator.api._generation import run_generation
from orchestrator.api._http import read_json_body, sse, watch_disconnect
from orchestrator.api._tool_fields import read_tool_choice, read_tools
from orchestrator.errors import BadRequestError, RequestError
from orchestrator.events import (
    Event,
    Finished,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
)
from orchestrator.generation import prompt_ids
from orchestrator.keepalive import KeepAlive
from orchestrator.models import ModelRegistry
from orchestrator.reasoning import ReasoningControl, thinking_signature
from orchestrator.tools import OutputPlan, plan_output

__all__ = ["ANTHROPIC_ERRORS", "MessagesRequest", "count_tokens", "messages",
           "parse_messages_request"]

# The SDK's error types by HTTP status (anthropic-sdk-python types/shared/error_type.py
# and _client.py); 503 is "overloaded" as Ollama maps it, so the SDK retries it.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error_body(error: RequestError) -> dict[str, Any]:
    fallback = "api_error" if error.status >= 500 else "invalid_request_error"
    return {"type": "error",
            "error": {"type": _ERROR_TYPES.get(error.status, fallback),
                      "message": error.message}}


ANTHROPIC_ERRORS = ErrorShape(anthropic_error_body)


@dataclass(frozen=True)
class MessagesRequest:
    basics: fields.Basics
    messages: list[dict[str, Any]]
    output: OutputPlan
    reasoning: ReasoningControl | None = None  # thinking


def _text_blocks(content: Any, where: str) -> str:
    """A string, or text blocks joined; other block types are refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequestError(f"{where} must be a string or an array of blocks")
    texts = []
    for j, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise BadRequestError(f"{where}[{j}] has type {kind!r}; only text is supported here")
        texts.append(str(block.get("text", "")))
    return "".join(texts)


def _turn(message: Any, i: int) -> list[dict[str, Any]]:
    """One Anthropic message as HF-convention messages."""
    where = f"messages[{i}]"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise BadRequestError(f"{where} must be an object with role user, assistant or system")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequestError(f"{where}.content must be a string or an array of blocks")
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        at = f"{where}.content[{j}]"
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking" and role == "assistant":
            assert isinstance(block, dict)
            thinking.append(str(block.get("thinking", "")))
        elif kind == "tool_use" and role == "assistant":
            assert isinstance(block, dict)
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise BadRequestError(f"{at}: a tool_use block needs a string id and name")
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": block.get("input")
                                       or {}}})
        elif kind == "tool_result" and role == "user":
            assert isinstance(block, dict)
            result = _text_blocks(block.get("content", ""), f"{at}.content")
            if block.get("is_error"):
                result = f"Error: {result}"
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": result})
        elif kind not in ("thinking", "redacted_thinking"):
            raise BadRequestError(f"{at} has type {kind!r}, which is not supported in a "
                                  f"{role} message here")
    turn: dict[str, Any] = {"role": role, "content": "".join(texts)}
    if thinking:
        turn["reasoning_content"] = "\n".join(thinking)
    if calls:
        turn["tool_calls"] = calls
    return [*results, turn] if texts or calls or not results else results


def parse_messages_request(body: Mapping[str, Any], *, counting: bool = False,
                           ) -> MessagesRequest:
    """The request, validated; ``counting`` (count_tokens) does not need ``max_tokens``."""
    basics = fields.basics(body, stop="stop_sequences")
    if basics.max_tokens is None and not counting:
        raise BadRequestError("max_tokens: Field required", param="max_tokens")
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise BadRequestError("messages must be a non-empty array", param="messages")
    # Claude Code sends system-controlled updates as ``role: "system"`` messages in
    # the middle of the conversation. They join the system prompt, in order: every
    # chat template takes a leading system message, many refuse one anywhere else.
    system_texts = [] if body.get("system") is None else [_text_blocks(body["system"], "system")]
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        if isinstance(message, dict) and message.get("role") == "system":
            system_texts.append(_text_blocks(message.get("content"), f"messages[{i}].content"))
        else:
            messages.extend(_turn(message, i))
    if system_texts:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system_texts)})
    return MessagesRequest(
        basics=basics,
        messages=messages,
        output=plan_output(read_tools(body, "anthropic"), read_tool_choice(body, "anthropic")),
        reasoning=_thinking(body),
    )


def _thinking(body: Mapping[str, Any]) -> ReasoningControl | None:
    thinking = fields.object_field(body, "thinking")
    kind = thinking.get("type")
    if not thinking:
        return None
    if kind == "disabled":
        return ReasoningControl(enabled=False)
    if kind == "adaptive":
        return ReasoningControl(enabled=True)
    budget = thinking.get("budget_tokens")
    if kind != "enabled" or not isinstance(budget, int) or isinstance(budget, bool) \
            or budget < 1:
        raise BadRequestError("thinking must be {\"type\": \"enabled\", \"budget_tokens\": N} "
                              "with N >= 1, or {\"type\": \"disabled\"}", param="thinking")
    return ReasoningControl(enabled=True, budget=budget)


def _stop_reason(finished: Finished) -> str:
    if finished.finish_reason == "tool_calls":
        return "tool_use"
    if finished.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if finished.stop_string is not None else "end_turn"


def _tool_use(call: ToolCall, input_: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name,
            "input": json.loads(call.arguments) if input_ is None else input_}


async def messages(request: Request, registry: ModelRegistry) -> Response:
    parsed = parse_messages_request(await read_json_body(request))
    model = registry.get(parsed.basics.model)
    message_id = new_id("msg_")

    async def build() -> GenerationRequest:
        return await chat_generation(model, parsed.messages, parsed.output, parsed.basics,
                                     parsed.reasoning)

    def message(content: list[dict[str, Any]], stop_reason: str | None,
                stop_sequence: str | None, usage: dict[str, int]) -> dict[str, Any]:
        return {"id": message_id, "type": "message", "role": "assistant", "model": model.name,
                "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": usage}

    def to_response(generation: GenerationRequest, events: list[Event]) -> Response:
        content: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, ReasoningDelta):
                if content and content[-1]["type"] == "thinking":
                    content[-1]["thinking"] += event.text
                else:
                    content.append({"type": "thinking", "thinking": event.text})
            elif isinstance(event, TextDelta):
                if content and content[-1]["type"] == "text":
                    content[-1]["text"] += event.text
                else:
                    content.append({"type": "text", "text": event.text})
            elif isinstance(event, ToolCall):
                content.append(_tool_use(event))
        for block in content:
            if block["type"] == "thinking":
                block["signature"] = thinking_signature(model.name, block["thinking"])
        finished = next(e for e in events if isinstance(e, Finished))
        usage = {**_input_usage(finished), "output_tokens": finished.completion_tokens}
        return JSONResponse(message(content, _stop_reason(finished), finished.stop_string,
                                    usage))

    def emit(kind: str, **payload: Any) -> bytes:
        return sse({"type": kind, **payload}, event=kind)

    async def to_sse(generation: GenerationRequest,
                     events: AsyncIterator[Event | KeepAlive]) -> AsyncGenerator[bytes, None]:
        usage = {"input_tokens": len(generation.prompt), "output_tokens": 0}
        yield emit("message_start", message=message([], None, None, usage))
        yield emit("ping")
        index = 0
        text_open = False
        thinking: str | None = None  # the open thinking block's text
        try:
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, KeepAlive):
                        yield emit("ping")
                        continue
                    if isinstance(event, ReasoningDelta):
                        if thinking is None:
                            thinking = ""
                            yield emit("content_block_start", index=index, content_block={
                                "type": "thinking", "thinking": "", "signature": ""})
                        thinking += event.text
                        yield emit("content_block_delta", index=index,
                                   delta={"type": "thinking_delta", "thinking": event.text})
                        continue
                    if thinking is not None:
                        yield emit("content_block_delta", index=index, delta={
                            "type": "signature_delta",
                            "signature": thinking_signature(model.name, thinking)})
                        yield emit("content_block_stop", index=index)
                        index, thinking = index + 1, None
                    if isinstance(event, TextDelta):
                        if not text_open:
                            yield emit("content_block_start", index=index,
                                       content_block={"type": "text", "text": ""})
                            text_open = True
                        yield emit("content_block_delta", index=index,
                                   delta={"type": "text_delta", "text": event.text})
                        continue
                    if text_open:
                        yield emit("content_block_stop", index=index)
                        index, text_open = index + 1, False
                    if isinstance(event, ToolCall):
                        yield emit("content_block_start", index=index,
                                   content_block=_tool_use(event, {}))
                        yield emit("content_block_delta", index=index,
                                   delta={"type": "input_json_delta",
                                          "partial_json": event.arguments})
                        yield emit("content_block_stop", index=index)
                        index += 1
                    elif isinstance(event, Finished):  # logprobs are never asked for here
                        yield emit("message_delta",
                                   delta={"stop_reason": _stop_reason(event),
                                          "stop_sequence": event.stop_string},
                                   usage={**_input_usage(event),
                                          "output_tokens": event.completion_tokens})
                        yield emit("message_stop")
        except (RequestError, DaemonsError) as exc:
            yield sse(anthropic_error_body(as_request_error(exc)), event="error")

    return await run_generation(request, model, build, stream=parsed.basics.stream, to_sse=to_sse,
                                to_response=to_response)


def _input_usage(finished: Finished) -> dict[str, int]:
    # Anthropic's input_tokens leaves out the tokens read from the cache, which it counts
    # apart (clients add the two for the prompt's size).
    return {"input_tokens": finished.prompt_tokens - finished.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": finished.cached_tokens}


async def count_tokens(request: Request, registry: ModelRegistry) -> Response:
    """``{"input_tokens": N}``: the real template and tokenizer, no generation."""
    parsed = parse_messages_request(await read_json_body(request), counting=True)
    model = registry.get(parsed.basics.model)
    async with watch_disconnect(request.receive):
        prompt = await prompt_ids(model, parsed.messages, parsed.output.template_tools)
    return JSONResponse({"input_tokens": len(prompt)})
