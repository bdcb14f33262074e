"""What Chat Completions and legacy Completions share on the wire.

Both answer with an object that has one ``id`` / ``created`` / ``model`` and a list
of choices; both stream that object chunk by chunk (§1.2, §1.3): choices with
``finish_reason: null`` until the last one, then, only when
``stream_options.include_usage`` asked for it, a usage chunk with ``choices: []``
(every earlier chunk then has ``usage: null``), then ``data: [DONE]``. A failure
after the headers went out is ``data: {"error": ...}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from daemons.errors import DaemonsError
from orchestrator.api import _fields as fields
from orchestrator.api._dialect import as_request_error
from orchestrator.api._http import sse
from orchestrator.errors import RequestError
from orchestrator.events import (
    Event,
    Finished,
    PromptLogprobs,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
)
from orchestrator.keepalive import KeepAlive

__all__ = ["KEEPALIVE_COMMENT", "OpenAIEnvelope", "include_usage", "openai_usage"]

# OpenAI clients skip SSE comments; an empty chunk instead would reach users as a delta.
KEEPALIVE_COMMENT = b": keepalive\n\n"


def include_usage(body: Mapping[str, Any], stream: bool) -> bool:
    """Whether a stream ends with a usage chunk (``stream_options.include_usage``)."""
    options = fields.object_field(body, "stream_options")
    return stream and bool(options.get("include_usage", False))


def openai_usage(finished: Finished) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
        # Prompt tokens the prefix cache restored instead of prefilling.
        "prompt_tokens_details": {"cached_tokens": finished.cached_tokens},
        # Tokens of a thinking model's reasoning block (orchestrator/reasoning.py).
        "completion_tokens_details": {"reasoning_tokens": finished.reasoning_tokens},
    }
    if finished.compressed_tokens:
        # PFlash: prompt_tokens were prefilled; these were compressed away before that.
        usage["prompt_tokens_details"]["compressed_tokens"] = finished.compressed_tokens
    if finished.speculative is not None:
        # Speculative decoding (PROTOCOL.md 5.9): which proposers ran, how well they guessed.
        spec = finished.speculative
        usage["speculative"] = {"acceptance_length": round(spec.acceptance_length, 3),
                                "draft_steps": spec.draft_steps, "accepted": spec.accepted,
                                "proposed": spec.proposed}
        if spec.method is not None:
            usage["speculative"]["method"] = spec.method
        if spec.tree_steps is not None:  # the draft's steps were verified as trees
            usage["speculative"]["tree_steps"] = spec.tree_steps
    return usage


@dataclass(frozen=True)
class OpenAIEnvelope:
    """The fields every object (or chunk) of one response repeats."""

    id: str
    model: str
    include_usage: bool
    created: int = field(default_factory=lambda: int(time.time()))

    def body(self, kind: str, choices: list[dict[str, Any]],
             finished: Finished | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created,
                                "model": self.model, "choices": choices}
        if finished is not None:
            body["usage"] = openai_usage(finished)
        elif self.include_usage:
            body["usage"] = None
        return body

    async def stream(
        self,
        kind: str,
        events: AsyncIterator[Event | KeepAlive],
        choices: Callable[[TextDelta | ReasoningDelta | ToolCall | TokenLogprob],
                          Iterable[dict[str, Any]]],
        last: Callable[[Finished], dict[str, Any]],
        first: dict[str, Any] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """The SSE body: ``first``, the ``choices`` of each event, ``last``, usage, [DONE]."""
        if first is not None:
            yield sse(self.body(kind, [first]))
        finished: Finished | None = None
        try:
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, KeepAlive):
                        yield KEEPALIVE_COMMENT
                        continue
                    if isinstance(event, Finished):
                        finished = event
                        continue
                    if isinstance(event, PromptLogprobs):
                        # Only legacy Completions asks for them, and it turns them into
                        # its echo chunk before they come here.
                        continue
                    for choice in choices(event):
                        yield sse(self.body(kind, [choice]))
        except (RequestError, DaemonsError) as exc:
            yield sse(as_request_error(exc).openai_body())
            yield sse("[DONE]")
            return
        assert finished is not None
        yield sse(self.body(kind, [last(finished)]))
        if self.include_usage:
            yield sse(self.body(kind, [], finished))
        yield sse("[DONE]")
