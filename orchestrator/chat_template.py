"""Chat templates: the GGUF's own Jinja template, rendered in a sandbox, or a fallback.

Templates come from model files, i.e. from strangers, so they run in jinja2's
``ImmutableSandboxedEnvironment`` (as transformers does) with the few helpers
HF-style templates expect (``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII text).

Messages reach a template in the HF convention every dialect maps onto: ``role``,
``content`` as text, assistant ``tool_calls`` as ``[{id, type: "function", function:
{name, arguments}}]`` with ``arguments`` a dict (templates ``tojson`` it), and
``tool`` messages with ``tool_call_id`` (plus ``name`` when it can be found from the
call it answers). ``tools`` are ``[{type: "function", function: {name, description,
parameters}}]``.

Models without ``tokenizer.chat_template`` (the embedded gemma3-270m base model is
one) get ``FALLBACK_TEMPLATE``: a plain transcript, documented in the README. With
tools, their list follows the leading system text, one JSON object a line, with the
call syntax ``orchestrator.tools`` parses; assistant calls are written in that same
syntax, one a line, and tool results as ``Tool result (<name>):`` lines::

    <system text>

    Tools:
    {"name": "get_weather", "description": "…", "parameters": {…}}
    To call a tool, reply with <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>

    User: <message>
    Assistant: <message>
    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
    Tool result (get_weather): <result>
    Assistant:

Generation on the fallback stops at ``FALLBACK_STOP`` so a base model that starts
writing the next user turn (or invents a tool result) is cut off there.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orchestrator.errors import BadRequestError, ChatTemplateError

__all__ = ["FALLBACK_STOP", "FALLBACK_TEMPLATE", "ChatTemplate", "flatten_content",
           "template_messages"]

_CALL_SYNTAX = '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
FALLBACK_TEMPLATE = (
    "{% macro tool_list() %}Tools:\n"
    "{% for tool in tools %}"
    "{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}{{ '\\n' }}"
    "{% endfor %}"
    "To call a tool, reply with " + _CALL_SYNTAX + "\n\n"
    "{% endmacro %}"
    "{% set ns = namespace(tools_shown=not tools) %}"
    "{% for message in messages %}"
    "{% if message['role'] != 'system' and not ns.tools_shown %}"
    "{{ tool_list() }}{% set ns.tools_shown = true %}"
    "{% endif %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}Assistant: {{ message['content'] }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    "<tool_call>"
    "{{ {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson }}"
    "</tool_call>"
    "{% endfor %}{{ '\\n' }}"
    "{% elif message['role'] == 'tool' %}Tool result"
    "{% if message['name'] %} ({{ message['name'] }}){% endif %}: {{ message['content'] }}\n"
    "{% else %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if not ns.tools_shown %}{{ tool_list() }}{% endif %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
FALLBACK_STOP = ("\nUser:", "\nTool result")


# Text parts as each dialect names them (Responses replays assistant turns as output_text).
_TEXT_PARTS = ("text", "input_text", "output_text")


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the model's chat template refused the request: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


def flatten_content(content: Any) -> str:
    """OpenAI message content is a string or a list of parts; templates want text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadRequestError(f"message content part of type {kind!r} is not supported; "
                                      "this model takes text only", param="messages")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise BadRequestError("message content must be a string or a list of text parts",
                          param="messages")


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the shape templates expect (see the module docstring); 400s on bad ones."""
    names: dict[str, str] = {}
    result: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        normalized = {**message, "content": flatten_content(message.get("content"))}
        normalized.pop("tool_calls", None)  # null or [] must read as absent to templates
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise BadRequestError(f"messages[{i}].tool_calls must be an array",
                                      param="messages")
            normalized["tool_calls"] = [_template_call(c, f"messages[{i}].tool_calls[{j}]")
                                        for j, c in enumerate(calls)]
            names.update((c["id"], c["function"]["name"]) for c in normalized["tool_calls"]
                         if isinstance(c["id"], str))
        if message.get("role") == "tool" and not message.get("name"):
            name = names.get(message.get("tool_call_id"))  # type: ignore[arg-type]
            if name:
                normalized["name"] = name
        result.append(normalized)
    return result


def _template_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise BadRequestError(f"{where}.function.name must be a non-empty string",
                              param="messages")
    assert isinstance(function, Mapping) and isinstance(call, Mapping)
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        # Templates tojson the arguments, so they want the object; text that is not
        # one is passed on as it is rather than refused.
        with contextlib.suppress(ValueError, RecursionError):
            arguments = json.loads(arguments) if arguments.strip() else {}
    return {"id": call.get("id"), "type": "function",
            "function": {"name": name, "arguments": {} if arguments is None else arguments}}


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    # Compiling is most of a render's cost, and a prompt renders several prefixes
    # (``message_boundaries``).
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


MAX_TAIL_BOUNDARIES = 4
"""Message boundaries marked at the end of a conversation (besides the end of its
system part): the earlier ones were marked when those messages were new."""


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    is_fallback: bool
    bos_token: str
    eos_token: str
    stop_strings: tuple[str, ...]
    # More template variables, e.g. ``enable_thinking=False`` (orchestrator/reasoning.py).
    variables: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def for_model(cls, template: str | None, *, bos_token: str, eos_token: str) -> ChatTemplate:
        if template:
            return cls(template, False, bos_token, eos_token, ())
        return cls(FALLBACK_TEMPLATE, True, bos_token, eos_token, FALLBACK_STOP)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        normalized = template_messages(messages)
        try:
            compiled = _compiled(self.source)
            return compiled.render(
                messages=normalized,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                tools=list(tools) if tools else None,
                **self.variables,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template failed to render: {exc}") from exc


def message_boundaries(template: ChatTemplate, messages: Sequence[Mapping[str, Any]],
                       tools: Sequence[Mapping[str, Any]] | None, text: str) -> list[int]:
    """Offsets in ``text`` (the conversation rendered with its generation prompt) where a
    message ends: after the leading system messages (with the tools), and after each of
    the last ``MAX_TAIL_BOUNDARIES`` messages. A boundary is kept only where the template
    renders that prefix of the conversation as a prefix of ``text`` (a template may
    render earlier turns differently once later ones follow)."""
    n_system = next((i for i, m in enumerate(messages) if m.get("role") != "system"),
                    len(messages))
    counts = {n_system, *range(max(n_system + 1, len(messages) - MAX_TAIL_BOUNDARIES),
                               len(messages))}
    cuts = set()
    for count in counts:
        if count == 0 and not tools:
            continue
        try:
            prefix = template.render(messages[:count], add_generation_prompt=False, tools=tools)
        except (ChatTemplateError, BadRequestError):
            continue
        if 0 < len(prefix) < len(text) and text.startswith(prefix):
            cuts.add(len(prefix))
    return sorted(cuts)
