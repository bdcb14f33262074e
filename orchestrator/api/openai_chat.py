"""OpenAI Chat Completions: ``POST /v1/chat/completions``, streaming and not.

Wire shapes follow the OpenAI OpenAPI spec as the official ``openai`` client
parses them (see shared/reference/api-conformance.md §1.2): constant ``id`` /
``created`` / ``model`` across chunks, the first delta carries the role, exactly
one non-null ``finish_reason``, the usage chunk (``stream_options.include_usage``)
has ``choices: []`` and comes before ``data: [DONE]``, and a failure after the
headers went out is ``data: {"error": ...}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.api._http import read_json_body, sse
from orchestrator.errors import BadRequestError, RequestError
from orchestrator.generation import (
    Event,
    Finished,
    GenerationRequest,
    TextDelta,
    prompt_ids,
    run_generation,
)
from orchestrator.models import ModelRegistry
from protocol import SamplingParams

__all__ = ["ChatRequest", "chat_completions", "parse_chat_request"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_MAX_STOP_STRINGS = 16

# llama.cpp's defaults, used when a request leaves a sampling field out, so a
# client sees the same behaviour it would get from llama-server.
_DEFAULT_TEMPERATURE = 0.8
_DEFAULT_TOP_K = 40
_DEFAULT_TOP_P = 0.95
_DEFAULT_MIN_P = 0.05


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    messages: list[dict[str, Any]]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    sampling: SamplingParams | None
    stop: tuple[str, ...]


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{key} must be a number", param=key)
    if not low <= value <= high:
        raise BadRequestError(f"{key} must be between {low} and {high}, got {value}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{key} must be an integer", param=key)
    if not low <= value <= high:
        raise BadRequestError(f"{key} must be between {low} and {high}, got {value}", param=key)
    return value


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


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if (isinstance(stop, list) and len(stop) <= _MAX_STOP_STRINGS
            and all(isinstance(s, str) for s in stop)):
        return tuple(stop)
    raise BadRequestError(f"stop must be a string or an array of at most {_MAX_STOP_STRINGS} "
                          "strings", param="stop")


def _sampling(body: Mapping[str, Any]) -> SamplingParams | None:
    temperature = _number(body, "temperature", 0.0, 2.0)
    temperature = _DEFAULT_TEMPERATURE if temperature is None else temperature
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = _integer(body, "top_k", 0, 1 << 20)
    min_p = _number(body, "min_p", 0.0, 1.0)
    freq = _number(body, "frequency_penalty", -2.0, 2.0)
    pres = _number(body, "presence_penalty", -2.0, 2.0)
    rep = _number(body, "repeat_penalty", 0.0, 10.0)
    seed = _integer(body, "seed", -(1 << 63), (1 << 64) - 1)
    if temperature == 0.0:
        return None  # greedy: penalties and truncation change nothing about the argmax path
    return SamplingParams(
        temp=temperature,
        top_k=_DEFAULT_TOP_K if top_k is None else top_k,
        top_p=_DEFAULT_TOP_P if top_p is None else top_p,
        min_p=_DEFAULT_MIN_P if min_p is None else min_p,
        rep_pen=rep if rep is not None else 1.0,
        freq_pen=freq or 0.0,
        pres_pen=pres or 0.0,
        seed=None if seed is None else seed & 0xFFFFFFFF,
    )


def parse_chat_request(body: Mapping[str, Any]) -> ChatRequest:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError("model must be a string", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequestError("stream_options must be an object", param="stream_options")
    n = _integer(body, "n", 1, 128)
    if n not in (None, 1):
        raise BadRequestError("only n=1 is supported", param="n")
    max_tokens = _integer(body, "max_completion_tokens", 1, 1 << 30)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1, 1 << 30)
    return ChatRequest(
        model=model,
        messages=_messages(body),
        stream=stream,
        include_usage=stream and bool(options.get("include_usage", False)),
        max_tokens=max_tokens,
        sampling=_sampling(body),
        stop=_stop(body),
    )


def _usage(finished: Finished) -> dict[str, int]:
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    }


async def chat_completions(request: Request, registry: ModelRegistry) -> Response:
    chat = parse_chat_request(await read_json_body(request))
    model = registry.get(chat.model)
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    async def build() -> GenerationRequest:
        prompt = await prompt_ids(model, chat.messages)
        return GenerationRequest(prompt, chat.max_tokens, chat.sampling, chat.stop)

    def to_response(generation: GenerationRequest, events: list[Event]) -> Response:
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        finished = next(e for e in events if isinstance(e, Finished))
        return JSONResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model.name,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finished.finish_reason,
            }],
            "usage": _usage(finished),
        })

    async def to_sse(generation: GenerationRequest,
                     events: AsyncIterator[Event]) -> AsyncGenerator[bytes, None]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            body: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model.name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish_reason}],
            }
            if chat.include_usage:
                body["usage"] = None
            return body

        yield sse(chunk({"role": "assistant", "content": ""}))
        finished: Finished | None = None
        try:
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, TextDelta):
                        yield sse(chunk({"content": event.text}))
                    elif isinstance(event, Finished):
                        finished = event
        except RequestError as exc:
            yield sse(exc.openai_body())
            yield sse("[DONE]")
            return
        assert finished is not None
        yield sse(chunk({}, finished.finish_reason))
        if chat.include_usage:
            yield sse({
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model.name,
                "choices": [],
                "usage": _usage(finished),
            })
        yield sse("[DONE]")

    return await run_generation(request, model, build, stream=chat.stream, to_sse=to_sse,
                                to_response=to_response)
