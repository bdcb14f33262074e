"""Tool calls in generated text, and the output constraints that force them.

Sans-IO and dialect-free: the dialects read their own request shapes into
``FunctionTool`` / ``ToolChoice`` / a response JSON schema, ``plan_output`` turns
those into what the core needs (the tools the chat template renders, a JSON schema
the daemon compiles into a grammar, and an ``OutputParser``), and the parsers here
turn the model's text into ``TextDelta`` and ``ToolCall`` events.

Two ways a call reaches us:

- ``tool_choice`` auto: the model writes ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>`` blocks, as Qwen and Hermes templates teach it (and as the
  fallback template documents). ``ToolCallParser`` streams the text around the
  blocks and turns each block into one ``ToolCall``; a block that is not a valid
  call (malformed JSON, no name) is passed on as text, tags included.
- forced (a named function, or ``required``): the daemon constrains decoding with a
  grammar built from ``{"name": const NAME, "arguments": <parameters schema>}`` (an
  ``anyOf`` of those for ``required``), so the whole output is one bare JSON call,
  which ``JsonCallParser`` turns into a ``ToolCall`` once it is complete. Even a weak
  model yields a valid call that way; output cut short by the token limit stays text.

A call is always emitted whole, never as fragments: dialects then stream it as one
delta pair (OpenAI) or one start/delta/stop block (Anthropic), which is exactly what
the SDK accumulators expect.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.errors import BadRequestError
from orchestrator.events import OutputParser, TextDelta, ToolCall

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "FunctionTool",
    "JsonCallParser",
    "OutputPlan",
    "ToolCallParser",
    "ToolChoice",
    "call_schema",
    "parse_call",
    "plan_output",
]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str | None
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def for_template(self) -> dict[str, Any]:
        """The HF / OpenAI shape chat templates iterate over as ``tools``."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["none", "auto", "required", "function"] = "auto"
    name: str | None = None  # the forced function, for mode "function"


@dataclass(frozen=True)
class OutputPlan:
    template_tools: list[dict[str, Any]] | None
    json_schema: str | None
    parser_factory: Callable[[], OutputParser] | None


def call_schema(tool: FunctionTool) -> dict[str, Any]:
    """The JSON schema of one call to ``tool``: what a forced call must look like."""
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
        "required": ["name", "arguments"],
    }


def plan_output(tools: Sequence[FunctionTool], choice: ToolChoice,
                response_schema: Mapping[str, Any] | None = None) -> OutputPlan:
    """How a request's tools, tool choice and response format shape its generation."""
    schema = None if response_schema is None else dict(response_schema)
    if not tools or choice.mode == "none":
        if choice.mode in ("required", "function"):
            raise BadRequestError(f"tool_choice {choice.mode!r} needs at least one tool",
                                  param="tool_choice")
        return OutputPlan(None, _dump(schema), None)
    template_tools = [tool.for_template() for tool in tools]
    if choice.mode == "function":
        tool = next((t for t in tools if t.name == choice.name), None)
        if tool is None:
            raise BadRequestError(f"tool_choice names {choice.name!r}, which is not among the "
                                  "request's tools", param="tool_choice")
        return OutputPlan(template_tools, _dump(call_schema(tool)), JsonCallParser)
    if choice.mode == "required":
        calls = [call_schema(t) for t in tools]
        forced = calls[0] if len(calls) == 1 else {"anyOf": calls}
        return OutputPlan(template_tools, _dump(forced), JsonCallParser)
    return OutputPlan(template_tools, _dump(schema), ToolCallParser)


def _dump(schema: Mapping[str, Any] | None) -> str | None:
    return None if schema is None else json.dumps(schema, ensure_ascii=False)


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_call(text: str) -> ToolCall | None:
    """``{"name": ..., "arguments": {...}}`` as a ``ToolCall``; None when it is not one.

    Accepts ``parameters`` for ``arguments`` (Llama-style) and arguments given as a
    JSON string holding an object (some models double-encode).
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(_new_call_id(), value["name"], json.dumps(arguments, ensure_ascii=False))


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that could still grow into ``marker``."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


class ToolCallParser:
    """Text with ``<tool_call>`` blocks in it, as events (``tool_choice`` auto).

    Whitespace right before a call is layout, not content: it is held back and
    dropped when a call follows, so a reply that is only a call has no text.
    """

    def __init__(self) -> None:
        self._buffer = ""  # outside a block: a possible start of CALL_OPEN; inside: the body
        self._inside = False
        self._whitespace = ""  # trailing whitespace of the text emitted so far, held back
        self._saw_call = False

    def feed(self, text: str) -> list[TextDelta | ToolCall]:
        self._buffer += text
        events: list[TextDelta | ToolCall] = []
        while True:
            if not self._inside:
                start = self._buffer.find(CALL_OPEN)
                if start < 0:
                    keep = _partial_suffix(self._buffer, CALL_OPEN)
                    cut = len(self._buffer) - keep
                    self._text(self._buffer[:cut], events)
                    self._buffer = self._buffer[cut:]
                    return events
                self._text(self._buffer[:start], events)
                self._buffer = self._buffer[start + len(CALL_OPEN):]
                self._inside = True
            else:
                end = self._buffer.find(CALL_CLOSE)
                if end < 0:
                    return events
                body, self._buffer = self._buffer[:end], self._buffer[end + len(CALL_CLOSE):]
                self._inside = False
                self._block(body, CALL_CLOSE, events)

    def finish(self) -> list[TextDelta | ToolCall]:
        events: list[TextDelta | ToolCall] = []
        if self._inside:
            # Generation ended inside a block (an end-of-turn token instead of the
            # closing tag is common): a complete call is still a call.
            self._block(self._buffer, "", events)
        else:
            self._text(self._buffer, events)
        self._buffer = ""
        if self._whitespace and not self._saw_call:
            events.append(TextDelta(self._whitespace))
        self._whitespace = ""
        return events

    def _block(self, body: str, close: str, events: list[TextDelta | ToolCall]) -> None:
        call = parse_call(body.strip())
        if call is None:
            self._text(CALL_OPEN + body + close, events)
            return
        self._whitespace = ""
        self._saw_call = True
        events.append(call)

    def _text(self, text: str, events: list[TextDelta | ToolCall]) -> None:
        content = text.rstrip()
        if not content:
            self._whitespace += text
            return
        events.append(TextDelta(self._whitespace + content))
        self._whitespace = text[len(content):]


class JsonCallParser:
    """The whole output is one bare JSON call (forced ``tool_choice``)."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, text: str) -> list[TextDelta | ToolCall]:
        self._text += text
        return []

    def finish(self) -> list[TextDelta | ToolCall]:
        text, self._text = self._text, ""
        call = parse_call(text.strip())
        if call is not None:
            return [call]
        return [TextDelta(text)] if text else []
