"""OpenAI legacy Completions: ``POST /v1/completions``, streaming and not.

The prompt is raw text (or token ids), tokenized without any chat template, and
nothing of a template applies (its stop strings included). ``text_completion``
objects carry one choice; streamed chunks are the same object with the new text,
the last one has the ``finish_reason``, then the usage chunk (``choices: []``,
only with ``stream_options.include_usage``) and ``data: [DONE]``. As in the spec,
``max_tokens`` defaults to 16. ``echo`` repeats the prompt before the completion (in
the first chunk when streamed); ``logprobs`` (api/_logprobs.py) gives the tokens'
log-probabilities, with ``echo`` the prompt's too (as evaluation harnesses score a
text: ``echo``, ``logprobs``, ``max_tokens: 0``, which only ``echo`` allows).
``suffix`` and ``best_of`` beyond 1 are refused rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.api import _fields as fields
from orchestrator.api._dialect import new_id
from orchestrator.api._generation import run_generation
from orchestrator.api._http import read_json_body
from orchestrator.api._logprobs import (
    completions_block,
    completions_echo_block,
    completions_logprobs,
)
from orchestrator.api._openai import OpenAIEnvelope, include_usage
from orchestrator.errors import BadRequestError
from orchestrator.events import (
    Event,
    Finished,
    GenerationRequest,
    PromptLogprobs,
    TextDelta,
    TokenLogprob,
)
from orchestrator.generation import tokenize_text
from orchestrator.keepalive import KeepAlive
from orchestrator.models import ModelRegistry, ServedModel

__all__ = ["CompletionRequest", "completions", "parse_completion_request"]

_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class CompletionRequest:
    basics: fields.Basics
    prompt: str | list[int]
    include_usage: bool
    logprobs: int | None = None
    echo: bool = False

    @property
    def scores_prompt(self) -> bool:
        """The prompt's logprobs are computed: ``echo`` with ``logprobs``, or an echo
        alone (``max_tokens: 0``), which the daemon serves as a scoring prefill."""
        return self.echo and (self.logprobs is not None or self.basics.max_tokens == 0)


@dataclass(frozen=True)
class _Echo(TextDelta):
    """The echoed prompt as the first streamed chunk, with its logprobs block."""

    block: dict[str, Any] | None = None


def _prompt(body: Mapping[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    # A batch of one is the same request as its single prompt.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequestError("prompt must not be empty", param="prompt")
        return prompt
    if (isinstance(prompt, list) and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)):
        return prompt
    raise BadRequestError("prompt must be a non-empty string or token-id array (a batch of "
                          "several prompts is not supported)", param="prompt")


def _refuse(body: Mapping[str, Any], key: str, allowed: tuple[Any, ...], why: str) -> None:
    if body.get(key) not in allowed:
        raise BadRequestError(f"{key} is not supported: {why}", param=key)


def parse_completion_request(body: Mapping[str, Any]) -> CompletionRequest:
    _refuse(body, "suffix", (None, ""), "this server does not insert text")
    _refuse(body, "best_of", (None, 1), "only one completion is generated")
    _refuse(body, "n", (None, 1), "only one completion is generated")
    echo = fields.boolean(body, "echo")
    # OpenAI allows max_tokens 0 with echo: the prompt (and its logprobs) alone.
    nothing = echo and body.get("max_tokens") == 0 and not isinstance(body["max_tokens"], bool)
    basics = fields.basics({**body, "max_tokens": None} if nothing else body)
    if basics.max_tokens is None:
        basics = dataclasses.replace(basics, max_tokens=0 if nothing else _DEFAULT_MAX_TOKENS)
    return CompletionRequest(basics, _prompt(body), include_usage(body, basics.stream),
                             logprobs=completions_logprobs(body), echo=echo)


async def _prompt_ids(model: ServedModel, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        return await tokenize_text(model, prompt)
    _, pieces, _ = await model.ready_parts()
    bad = next((t for t in prompt if not 0 <= t < pieces.n_vocab), None)
    if bad is not None:
        raise BadRequestError(f"prompt token id {bad} is outside the vocabulary "
                              f"(0..{pieces.n_vocab - 1})", param="prompt")
    return list(prompt)


def _choice(text: str, finish_reason: str | None,
            logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}


async def _echo_text(model: ServedModel, prompt: str | list[int]) -> str:
    if isinstance(prompt, str):
        return prompt
    _, pieces, _ = await model.ready_parts()
    return b"".join(pieces.pieces[t] for t in prompt).decode("utf-8", errors="replace")


async def completions(request: Request, registry: ModelRegistry) -> Response:
    parsed = parse_completion_request(await read_json_body(request))
    model = registry.get(parsed.basics.model)
    envelope = OpenAIEnvelope(new_id("cmpl-"), model.name, parsed.include_usage)

    echoed = ""
    first_piece = b""

    async def build() -> GenerationRequest:
        nonlocal echoed, first_piece
        prompt = await _prompt_ids(model, parsed.prompt)
        echoed = await _echo_text(model, parsed.prompt) if parsed.echo else ""
        _, pieces, _ = await model.ready_parts()
        first_piece = pieces.pieces[prompt[0]]
        basics = parsed.basics
        scoring = parsed.scores_prompt
        return GenerationRequest(prompt, basics.max_tokens, basics.sampling, basics.stop,
                                 template_stops=False, lookup=basics.lookup,
                                 logprobs=0 if scoring and parsed.logprobs is None
                                 else parsed.logprobs,
                                 prompt_logprobs=scoring)

    def echo_block(scored: PromptLogprobs) -> dict[str, Any] | None:
        if parsed.logprobs is None:
            return None  # an echo alone, scored only because it generates nothing
        shown = echoed.startswith(first_piece.decode("utf-8", errors="replace"))
        return completions_echo_block(first_piece, scored.entries, echoed, first_shown=shown)

    def to_response(generation: GenerationRequest, events: list[Event]) -> Response:
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        finished = next(e for e in events if isinstance(e, Finished))
        logprobs = None if parsed.logprobs is None else completions_block(
            [e for e in events if isinstance(e, TokenLogprob)], len(echoed))
        scored = next((e for e in events if isinstance(e, PromptLogprobs)), None)
        prompt_block = echo_block(scored) if scored is not None else None
        if logprobs is not None and prompt_block is not None:
            logprobs = {key: prompt_block[key] + logprobs[key] for key in logprobs}
        return JSONResponse(envelope.body(
            "text_completion", [_choice(echoed + text, finished.finish_reason, logprobs)],
            finished))

    def to_sse(generation: GenerationRequest,
               events: AsyncIterator[Event | KeepAlive]) -> AsyncGenerator[bytes, None]:
        pending: list[TokenLogprob] = []
        offset = len(echoed)  # where the next token's text starts in the returned text

        def block() -> dict[str, Any] | None:
            nonlocal offset
            if parsed.logprobs is None:
                return None
            shown = completions_block(pending, offset)
            offset += sum(len(token) for token in shown["tokens"])
            pending.clear()
            return shown

        def choices(event: object) -> list[dict[str, Any]]:
            # Tool calls never occur here: a raw prompt has no tools and no parser.
            if isinstance(event, TokenLogprob):
                pending.append(event)
                return []
            if isinstance(event, _Echo):
                return [_choice(event.text, None, event.block)]
            return [_choice(event.text, None, block())] if isinstance(event, TextDelta) else []

        async def echo_first(
            events: AsyncIterator[Event | KeepAlive],
        ) -> AsyncGenerator[Event | KeepAlive, None]:
            # A scored prompt's echo waits for its logprobs, the core's first event.
            async with aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    yield (_Echo(echoed, echo_block(event))
                           if isinstance(event, PromptLogprobs) else event)

        scoring = parsed.scores_prompt
        return envelope.stream(
            "text_completion", echo_first(events) if scoring else events,
            choices=choices,
            last=lambda finished: _choice("", finished.finish_reason,
                                          block() if pending else None),
            first=_choice(echoed, None) if parsed.echo and not scoring else None,
        )

    return await run_generation(request, model, build, stream=parsed.basics.stream, to_sse=to_sse,
                                to_response=to_response)
