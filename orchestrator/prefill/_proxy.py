"""Proxy mode: the (compressed) conversation goes to an upstream OpenAI-compatible server.

The request is rebuilt in Chat Completions shape (messages, tools and the tool
choice the dialect asked for, a response schema, sampling, stop strings, the token
limit), always streamed (``stream_options.include_usage``), and the upstream's chunks
become the core's events (``TextDelta``, ``ToolCall``, ``Finished``), so every
dialect answers in its own shape, streaming or not, exactly as for a local model.
Tool calls the upstream streams in fragments are emitted whole, once complete; text
goes through the request's output parser as a local generation's would.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import httpx

from orchestrator.chat_template import flatten_content
from orchestrator.errors import (
    BadRequestError,
    RequestError,
    ServiceUnavailableError,
    UpstreamError,
)
from orchestrator.events import Event, Finished, GenerationRequest, TextDelta, ToolCall
from orchestrator.prefill._settings import UpstreamSettings, upstream_endpoint
from orchestrator.tools import JsonCallParser

__all__ = ["upstream_body", "upstream_events"]

log = logging.getLogger("lucerna.prefill")

_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def _openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    result = {key: message[key] for key in _MESSAGE_KEYS if message.get(key) is not None}
    content = message.get("content")
    result["content"] = None if content is None else flatten_content(content)
    calls = message.get("tool_calls")
    if calls:
        result["tool_calls"] = [_openai_call(call) for call in calls]
    return result


def _openai_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps({} if arguments is None else arguments, ensure_ascii=False)
    return {"id": call.get("id"), "type": "function",
            "function": {"name": function.get("name"), "arguments": arguments}}


def _forced_tool_choice(schema_text: str) -> str | dict[str, Any]:
    """The tool choice behind a forced call's schema (``orchestrator.tools.call_schema``)."""
    schema = json.loads(schema_text)
    name = schema.get("properties", {}).get("name", {}).get("const")
    if isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    return "required"


def upstream_body(request: GenerationRequest, model: str) -> dict[str, Any]:
    """The Chat Completions request that asks the upstream for ``request``."""
    assert request.conversation is not None
    body: dict[str, Any] = {
        "model": model,
        "messages": [_openai_message(m) for m in request.conversation.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    sampling = request.sampling
    if sampling is None:
        body["temperature"] = 0.0
    else:
        body["temperature"] = sampling.temp
        for key, value in (("top_k", sampling.top_k), ("top_p", sampling.top_p),
                           ("min_p", sampling.min_p), ("seed", sampling.seed)):
            if value is not None:
                body[key] = value
        if sampling.freq_pen:
            body["frequency_penalty"] = sampling.freq_pen
        if sampling.pres_pen:
            body["presence_penalty"] = sampling.pres_pen
        if sampling.rep_pen != 1.0:
            body["repeat_penalty"] = sampling.rep_pen
    if request.stop_strings:
        body["stop"] = list(request.stop_strings)
    tools = request.conversation.tools
    forced = request.parser_factory is JsonCallParser
    if tools:
        body["tools"] = [dict(tool) for tool in tools]
        if forced and request.json_schema is not None:
            body["tool_choice"] = _forced_tool_choice(request.json_schema)
    if request.json_schema is not None and not forced:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "schema": json.loads(request.json_schema)}}
    return body


def _upstream_message(response: httpx.Response, text: str) -> str:
    try:
        error = json.loads(text).get("error")
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    except (ValueError, AttributeError):
        pass
    return text.strip()[:500] or response.reason_phrase


def _refusal(response: httpx.Response, text: str, url: str) -> RequestError:
    message = f"upstream {url} answered {response.status_code}: {_upstream_message(response, text)}"
    if response.status_code == 400:
        return BadRequestError(message)
    if response.status_code in (429, 503):
        return ServiceUnavailableError(message)
    return UpstreamError(message)


class _Calls:
    """Tool-call fragments by index, until each is whole."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def feed(self, deltas: Sequence[Mapping[str, Any]]) -> None:
        for delta in deltas:
            index = int(delta.get("index", 0))
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            function = delta.get("function") or {}
            if delta.get("id"):
                call["id"] = str(delta["id"])
            if function.get("name"):
                call["name"] += str(function["name"])
            if function.get("arguments"):
                call["arguments"] += str(function["arguments"])

    def whole(self) -> list[ToolCall]:
        return [ToolCall(id=call["id"] or f"call_{index}", name=call["name"],
                         arguments=call["arguments"] or "{}")
                for index, call in sorted(self._calls.items())]


async def upstream_events(settings: UpstreamSettings, request: GenerationRequest,
                          model: str) -> AsyncGenerator[Event, None]:
    """Ask the upstream for ``request``; yield its answer as the core's events."""
    url = upstream_endpoint(settings.url)
    headers = {"Authorization": f"Bearer {settings.key}"} if settings.key else {}
    body = upstream_body(request, settings.model or model)
    parser = request.parser_factory() if request.parser_factory else None
    calls = _Calls()
    finish_reason: str = "stop"
    usage: Mapping[str, Any] = {}
    n_deltas = 0
    started = time.perf_counter()
    first_at: float | None = None
    saw_call = False
    timeout = httpx.Timeout(settings.timeout_s, connect=30.0)
    try:
        async with httpx.AsyncClient(timeout=timeout) as client, client.stream(
                "POST", url, json=body, headers=headers) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", errors="replace")
                raise _refusal(response, text, url)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # event names, comments, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    raise UpstreamError(f"upstream {url} failed mid-stream: "
                                        f"{_upstream_message(response, data)}")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if first_at is None and (delta.get("content") or delta.get("tool_calls")):
                        first_at = time.perf_counter()
                    if delta.get("tool_calls"):
                        calls.feed(delta["tool_calls"])
                    content = delta.get("content")
                    if content:
                        n_deltas += 1
                        for event in parser.feed(content) if parser else [TextDelta(content)]:
                            saw_call |= isinstance(event, ToolCall)
                            yield event
                    if choice.get("finish_reason"):
                        finish_reason = str(choice["finish_reason"])
    except httpx.TransportError as exc:
        raise UpstreamError(f"upstream {url} could not be reached or stopped answering: "
                            f"{type(exc).__name__}: {exc}") from exc
    except ValueError as exc:  # json.JSONDecodeError included
        raise UpstreamError(f"upstream {url} sent something that is not a Chat Completions "
                            f"stream: {exc}") from exc
    tail: list[TextDelta | ToolCall] = [*(parser.finish() if parser else []), *calls.whole()]
    for event in tail:
        saw_call |= isinstance(event, ToolCall)
        yield event
    ended = time.perf_counter()
    first = first_at or ended
    if saw_call:
        finish_reason = "tool_calls"
    elif finish_reason not in ("stop", "length"):
        finish_reason = "stop"
    yield Finished(
        finish_reason=finish_reason,
        prompt_tokens=int(usage.get("prompt_tokens") or len(request.prompt)),
        completion_tokens=int(usage.get("completion_tokens") or n_deltas),
        prefill_ms=(first - started) * 1000,
        decode_ms=(ended - first) * 1000,
        compressed_tokens=request.compressed_tokens,
    )
