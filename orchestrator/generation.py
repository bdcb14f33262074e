"""The one generation core every API dialect shares.

A dialect turns its request into a ``GenerationRequest`` and its events back into
its wire shape; everything between (prompt tokenization, context checks, the
daemon's ``generate``, detokenization, stop strings, usage) happens here once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemons.errors import DaemonDiedError, DaemonReplyError
from orchestrator.errors import BadRequestError, ContextLengthError, ServiceUnavailableError
from orchestrator.models import ServedModel
from orchestrator.textstream import IncrementalDetokenizer, StopStringMatcher
from protocol import SamplingParams

__all__ = [
    "Finished",
    "GenerationRequest",
    "TextDelta",
    "completion_budget",
    "generate_text",
    "prompt_ids",
]


@dataclass(frozen=True)
class GenerationRequest:
    prompt: list[int]
    max_tokens: int | None
    sampling: SamplingParams | None = None
    stop_strings: tuple[str, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Finished:
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: float


async def prompt_ids(
    model: ServedModel, messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Render the chat template and tokenize the result on the model's daemon."""
    client, _, template = model.ready_parts()
    text = template.render(messages, add_generation_prompt=True, tools=tools)
    bos_text = template.bos_token
    # A template that writes the BOS text itself must not get a second BOS.
    add_bos = None if not (bos_text and text.startswith(bos_text)) else False
    try:
        return await client.tokenize(text, special=True, add_bos=add_bos)
    except DaemonDiedError as exc:
        raise ServiceUnavailableError(f"model {model.name!r} is not available: {exc}") from exc


def completion_budget(model: ServedModel, request: GenerationRequest) -> int:
    """How many tokens may be generated; raises the 400s a request can earn."""
    n_ctx = model.n_ctx
    n_prompt = len(request.prompt)
    if n_prompt == 0:
        raise BadRequestError("the prompt is empty after applying the chat template")
    if n_prompt >= n_ctx:
        raise ContextLengthError(
            f"This model's maximum context length is {n_ctx} tokens. However, your messages "
            f"resulted in {n_prompt} tokens, leaving no room for a completion.",
            param="messages",
        )
    room = n_ctx - n_prompt
    # Like llama-server, a max_tokens beyond the context is clamped to what fits
    # rather than refused; finish_reason "length" tells the client it was cut.
    return room if request.max_tokens is None else min(request.max_tokens, room)


async def generate_text(
    model: ServedModel, request: GenerationRequest
) -> AsyncGenerator[TextDelta | Finished, None]:
    """Run one generation, yielding text as it becomes safe to show, then ``Finished``.

    Consume it with ``contextlib.aclosing`` so leaving early (client gone, error)
    stops the daemon's generation at once.
    """
    client, pieces, template = model.ready_parts()
    n_gen = completion_budget(model, request)
    detokenizer = IncrementalDetokenizer(pieces)
    stops = StopStringMatcher((*request.stop_strings, *template.stop_strings))
    completion_tokens = 0
    try:
        async with client.generate(request.prompt, n_gen, sampling=request.sampling) as stream:
            async for token in stream:
                completion_tokens += 1
                text = stops.feed(detokenizer.feed(token))
                if text:
                    yield TextDelta(text)
                if stops.stopped:
                    break
            summary = stream.summary
    except DaemonDiedError as exc:
        raise ServiceUnavailableError(
            f"model {model.name!r} became unavailable during generation: {exc}") from exc
    except DaemonReplyError as exc:
        if exc.code == "context_overflow":
            raise ContextLengthError(exc.detail, param="messages") from exc
        raise
    if not stops.stopped:
        tail = stops.feed(detokenizer.flush()) + stops.flush()
        if tail:
            yield TextDelta(tail)
    natural_end = summary is not None and summary.finish in ("eog", "stop")
    yield Finished(
        finish_reason="stop" if stops.stopped or natural_end else "length",
        prompt_tokens=len(request.prompt),
        completion_tokens=completion_tokens,
        prefill_ms=summary.prefill_ms if summary else 0.0,
        decode_ms=summary.decode_ms if summary else 0.0,
    )
