"""OpenAI Responses: ``POST /v1/responses``, what Codex speaks, streaming and not.

Input is a string or a list of items: ``message`` items (text parts), and for
multi-turn tool use the ``function_call`` items the model made and the
``function_call_output`` items answering them; the text of a ``reasoning`` item
(its summary, else its content) becomes the next assistant message's
``reasoning_content``, which a thinking model's template writes back as it expects.
Nothing is stored: ``previous_response_id`` is refused, so a client sends the whole
conversation (Codex does, with ``store: false``).

A stream is the event sequence the SDK's accumulator and Codex require (§1.4), each
event with a strictly increasing ``sequence_number``: ``response.created``,
``response.in_progress``; for text ``output_item.added`` (message) →
``content_part.added`` (output_text) → ``output_text.delta``* → ``output_text.done``
→ ``content_part.done`` → ``output_item.done``; for each call ``output_item.added``
(function_call) → ``function_call_arguments.delta`` → ``.done`` →
``output_item.done``; for a thinking model's reasoning (orchestrator/reasoning.py),
before the text, ``output_item.added`` (reasoning) → ``reasoning_summary_part.added``
→ ``reasoning_summary_text.delta``* → ``.done`` → ``reasoning_summary_part.done`` →
``output_item.done``; then exactly one of ``response.completed``,
``response.incomplete`` (cut by ``max_output_tokens``) or ``response.failed``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemons.errors import DaemonsError
from orchestrator.api import _fields as fields
from orchestrator.api._dialect import as_request_error, chat_generation, new_id
from orchestrator.api._generation import run_generation
from orchestrator.api._http import read_json_body, sse
from orchestrator.api._logprobs import chat_entry, responses_logprobs
from orchestrator.api._tool_fields import read_response_format, read_tool_choice, read_tools
from orchestrator.errors import BadRequestError, RequestError
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

__all__ = ["ResponsesRequest", "parse_responses_request", "responses"]

_MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system",
                  "developer": "system"}


@dataclass(frozen=True)
class ResponsesRequest:
    body: Mapping[str, Any]  # echoed back in the Response object
    basics: fields.Basics
    messages: list[dict[str, Any]]
    output: OutputPlan
    # include: ["message.output_text.logprobs"]: top_logprobs alternatives per token.
    logprobs: int | None = None
    reasoning: ReasoningControl | None = None  # reasoning.effort


def _input_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    instructions = fields.string(body, "instructions")
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    value = body.get("input")
    if isinstance(value, str):
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise BadRequestError("input must be a string or a non-empty array of items",
                              param="input")
    reasoning = ""  # from a reasoning item, for the assistant message that follows it

    def assistant(message: dict[str, Any]) -> dict[str, Any]:
        nonlocal reasoning
        if reasoning:
            message = {**message, "reasoning_content": reasoning}
            reasoning = ""
        return message

    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequestError(f"input[{i}] must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = _MESSAGE_ROLES.get(item.get("role"))  # type: ignore[arg-type]
            if role is None:
                raise BadRequestError(f"input[{i}].role must be one of "
                                      f"{', '.join(_MESSAGE_ROLES)}", param="input")
            message = {"role": role, "content": item.get("content")}
            messages.append(assistant(message) if role == "assistant" else message)
        elif kind == "function_call":
            call = {"id": _text(item, "call_id", i), "type": "function",
                    "function": {"name": _text(item, "name", i),
                                 "arguments": _text(item, "arguments", i)}}
            # Calls made in one turn belong to that turn's assistant message.
            if messages and messages[-1]["role"] == "assistant":
                messages[-1] = assistant({**messages[-1], "tool_calls":
                                          [*messages[-1].get("tool_calls", []), call]})
            else:
                messages.append(assistant({"role": "assistant", "content": "",
                                           "tool_calls": [call]}))
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _text(item, "call_id", i),
                             "content": item.get("output")})
        elif kind == "reasoning":
            parts = item.get("summary") or item.get("content") or []
            reasoning += "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        else:
            raise BadRequestError(f"input[{i}] has type {kind!r}, which this server does not "
                                  "support", param="input")
    return messages


def _text(item: Mapping[str, Any], key: str, i: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise BadRequestError(f"input[{i}].{key} must be a string", param="input")
    return value


def parse_responses_request(body: Mapping[str, Any]) -> ResponsesRequest:
    if body.get("previous_response_id") is not None:
        raise BadRequestError("previous_response_id is not supported: this server stores no "
                              "responses; send the whole conversation as input",
                              param="previous_response_id")
    text = fields.object_field(body, "text")
    return ResponsesRequest(
        body=body,
        basics=fields.basics(body, max_tokens=("max_output_tokens",), stop=None),
        messages=_input_messages(body),
        output=plan_output(read_tools(body, "responses"), read_tool_choice(body, "responses"),
                           read_response_format(text.get("format"), "text.format")),
        logprobs=responses_logprobs(body),
        reasoning=fields.reasoning_effort(
            fields.object_field(body, "reasoning").get("effort"), "reasoning.effort"),
    )


@dataclass
class _Output:
    """Builds the output items from generation events, noting each stream event on the way.

    The non-streaming path runs the same builder and ignores the events, so both
    paths produce the same items.
    """

    items: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _message_id: str | None = None  # the message item being written, if one is open
    _text: str = ""
    # Logprobs of tokens whose text has not been noted yet, and of the open message.
    _pending: list[dict[str, Any]] = field(default_factory=list)
    _logprobs: list[dict[str, Any]] = field(default_factory=list)
    _reasoning_id: str | None = None  # the reasoning item being written, if one is open
    _reasoning: str = ""

    def reasoning(self, delta: ReasoningDelta) -> None:
        if self._reasoning_id is None:
            self._reasoning_id, self._reasoning = new_id("rs_"), ""
            self._note("response.output_item.added", output_index=len(self.items),
                       item=self._reasoning_item([]))
            self._note("response.reasoning_summary_part.added", **self._summary_ref(),
                       part=_summary(""))
        self._reasoning += delta.text
        self._note("response.reasoning_summary_text.delta", **self._summary_ref(),
                   delta=delta.text)

    def _reasoning_item(self, summary: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self._reasoning_id, "type": "reasoning", "summary": summary}

    def _summary_ref(self) -> dict[str, Any]:
        return {"item_id": self._reasoning_id, "output_index": len(self.items),
                "summary_index": 0}

    def _close_reasoning(self) -> None:
        if self._reasoning_id is None:
            return
        self._note("response.reasoning_summary_text.done", **self._summary_ref(),
                   text=self._reasoning)
        self._note("response.reasoning_summary_part.done", **self._summary_ref(),
                   part=_summary(self._reasoning))
        done = self._reasoning_item([_summary(self._reasoning)])
        self._note("response.output_item.done", output_index=len(self.items), item=done)
        self.items.append(done)
        self._reasoning_id = None

    def logprob(self, logprob: TokenLogprob) -> None:
        self._pending.append(chat_entry(logprob))

    def _note(self, kind: str, **payload: Any) -> None:
        self.events.append((kind, payload))

    def _message(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self._message_id, "type": "message", "status": status,
                "role": "assistant", "content": content}

    def _part_ref(self) -> dict[str, Any]:
        return {"item_id": self._message_id, "output_index": len(self.items),
                "content_index": 0}

    def text(self, delta: TextDelta) -> None:
        self._close_reasoning()
        if self._message_id is None:
            self._message_id, self._text = new_id("msg_"), ""
            self._note("response.output_item.added", output_index=len(self.items),
                       item=self._message("in_progress", []))
            self._note("response.content_part.added", **self._part_ref(),
                       part=_output_text(""))
        self._text += delta.text
        self._logprobs += self._pending
        self._note("response.output_text.delta", **self._part_ref(), delta=delta.text,
                   logprobs=self._pending)
        self._pending = []

    def call(self, call: ToolCall) -> None:
        self.close()
        self._close_reasoning()
        item = {"id": new_id("fc_"), "type": "function_call", "status": "in_progress",
                "call_id": call.id, "name": call.name, "arguments": ""}
        ref = {"item_id": item["id"], "output_index": len(self.items)}
        self._note("response.output_item.added", output_index=ref["output_index"], item=item)
        self._note("response.function_call_arguments.delta", **ref, delta=call.arguments)
        self._note("response.function_call_arguments.done", **ref, name=call.name,
                   arguments=call.arguments)
        done = {**item, "status": "completed", "arguments": call.arguments}
        self._note("response.output_item.done", output_index=ref["output_index"], item=done)
        self.items.append(done)

    def close(self, status: str = "completed") -> None:
        """End the open message item, if any (``incomplete`` when cut by the token limit)."""
        self._close_reasoning()
        if self._message_id is None:
            return
        self._logprobs += self._pending  # held-back text that never showed
        self._pending = []
        part = _output_text(self._text, self._logprobs)
        self._note("response.output_text.done", **self._part_ref(), text=self._text,
                   logprobs=self._logprobs)
        self._logprobs = []
        self._note("response.content_part.done", **self._part_ref(), part=part)
        done = self._message(status, [part])
        self._note("response.output_item.done", output_index=len(self.items), item=done)
        self.items.append(done)
        self._message_id = None


def _output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _usage(finished: Finished) -> dict[str, Any]:
    details = {"cached_tokens": finished.cached_tokens}
    if finished.compressed_tokens:  # PFlash removed these before the prefill
        details["compressed_tokens"] = finished.compressed_tokens
    return {
        "input_tokens": finished.prompt_tokens,
        "input_tokens_details": details,
        "output_tokens": finished.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": finished.reasoning_tokens},
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    }


async def responses(request: Request, registry: ModelRegistry) -> Response:
    parsed = parse_responses_request(await read_json_body(request))
    model = registry.get(parsed.basics.model)
    response_id = new_id("resp_")
    created = int(time.time())
    body = parsed.body

    def response(status: str, output: list[dict[str, Any]], *,
                 finished: Finished | None = None,
                 error: RequestError | None = None) -> dict[str, Any]:
        incomplete = status == "incomplete"
        return {
            "id": response_id,
            "object": "response",
            "created_at": created,
            "status": status,
            "error": None if error is None else {"code": error.code or error.error_type,
                                                 "message": error.message},
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": parsed.basics.max_tokens,
            "model": model.name,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "store": False,
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "truncation": "disabled",
            "metadata": body.get("metadata") or {},
            "usage": None if finished is None else _usage(finished),
        }

    def final_status(finished: Finished) -> str:
        return "incomplete" if finished.finish_reason == "length" else "completed"

    async def build() -> GenerationRequest:
        generation = await chat_generation(model, parsed.messages, parsed.output, parsed.basics,
                                           parsed.reasoning)
        return dataclasses.replace(generation, logprobs=parsed.logprobs)

    def collect(events: list[Event], output: _Output) -> Finished | None:
        finished = None
        for event in events:
            if isinstance(event, TextDelta):
                output.text(event)
            elif isinstance(event, ToolCall):
                output.call(event)
            elif isinstance(event, TokenLogprob):
                output.logprob(event)
            elif isinstance(event, ReasoningDelta):
                output.reasoning(event)
            elif isinstance(event, Finished):  # prompt logprobs are never asked for here
                finished = event
                output.close("incomplete" if event.finish_reason == "length" else "completed")
        return finished

    def to_response(generation: GenerationRequest, events: list[Event]) -> Response:
        output = _Output()
        finished = collect(events, output)
        assert finished is not None
        return JSONResponse(response(final_status(finished), output.items, finished=finished))

    async def to_sse(generation: GenerationRequest,
                     events: AsyncIterator[Event | KeepAlive]) -> AsyncGenerator[bytes, None]:
        sequence = 0

        def emit(kind: str, **payload: Any) -> bytes:
            nonlocal sequence
            sequence += 1
            return sse({"type": kind, "sequence_number": sequence - 1, **payload}, event=kind)

        output = _Output()
        yield emit("response.created", response=response("in_progress", []))
        yield emit("response.in_progress", response=response("in_progress", []))
        finished: Finished | None = None
        try:
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, KeepAlive):
                        # A real event: Codex's idle timer ignores SSE comments.
                        yield emit("response.in_progress", response=response("in_progress", []))
                        continue
                    finished = collect([event], output) or finished
                    for kind, payload in output.events:
                        yield emit(kind, **payload)
                    output.events.clear()
        except (RequestError, DaemonsError) as exc:
            error = as_request_error(exc)
            yield emit("response.failed", response=response("failed", output.items, error=error))
            return
        assert finished is not None
        status = final_status(finished)
        yield emit(f"response.{status}",
                   response=response(status, output.items, finished=finished))

    return await run_generation(request, model, build, stream=parsed.basics.stream, to_sse=to_sse,
                                to_response=to_response)
