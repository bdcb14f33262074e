"""Chat templates: the GGUF's own Jinja template, rendered in a sandbox, or a fallback.

Templates come from model files, i.e. from strangers, so they run in jinja2's
``ImmutableSandboxedEnvironment`` (as transformers does) with the few helpers
HF-style templates expect (``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII text).

Models without ``tokenizer.chat_template`` (the embedded gemma3-270m base model is
one) get ``FALLBACK_TEMPLATE``: a plain transcript, documented in the README::

    <system text>

    User: <message>
    Assistant: <message>
    User: <message>
    Assistant:

Generation on the fallback stops at ``FALLBACK_STOP`` so a base model that starts
writing the next user turn is cut off there.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orchestrator.errors import BadRequestError, ChatTemplateError

__all__ = ["FALLBACK_STOP", "FALLBACK_TEMPLATE", "ChatTemplate", "flatten_content"]

FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}Assistant: {{ message['content'] }}\n"
    "{% else %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
FALLBACK_STOP = ("\nUser:",)


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
            if not isinstance(part, Mapping) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadRequestError(f"message content part of type {kind!r} is not supported; "
                                      "this model takes text only", param="messages")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise BadRequestError("message content must be a string or a list of text parts",
                          param="messages")


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    is_fallback: bool
    bos_token: str
    eos_token: str
    stop_strings: tuple[str, ...]

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
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        normalized = [{**m, "content": flatten_content(m.get("content"))} for m in messages]
        try:
            compiled = env.from_string(self.source)
            return compiled.render(
                messages=normalized,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                tools=list(tools) if tools else None,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template failed to render: {exc}") from exc
