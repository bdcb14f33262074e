"""The one generation core every API dialect shares.

A dialect turns its request into a ``GenerationRequest`` and the events of
``generate_events`` back into its wire shape (the vocabulary is
orchestrator/events.py); everything between (prompt tokenization, PFlash, context
checks, the daemon's ``generate``, detokenization, stop strings, tool-call
extraction, usage, and recovery from a daemon crash) happens here once. The core
takes plain values and yields events: it knows no HTTP. The model's queue,
disconnect watching, keep-alives and the response are the API's
(orchestrator/api/_generation.py).

Recovery: when the daemon dies mid-request the supervisor restarts it; the request
then continues on the new daemon by prefilling the prompt plus every token it had
already generated, and carries on from there. The client sees one uninterrupted
stream (under greedy decoding, the same tokens an uninterrupted run gives). A
request whose daemon had produced nothing yet is simply retried. A request survives
``MAX_RECOVERIES`` deaths in a row, a row being deaths with no token generated
between them: a daemon killed now and then (an OOM killer under memory pressure)
costs the stream nothing however long it runs, while a *poison* request, one whose
own prompt kills the daemon each time, ends with a clean 503 and an error log of what
is known of it instead of crash-looping the daemon under every other stream.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from dataclasses import dataclass
from typing import Any

from daemons.client import DecodeOptions
from daemons.errors import DaemonDiedError, DaemonReplyError
from orchestrator.chat_template import message_boundaries
from orchestrator.errors import BadRequestError, ContextLengthError, ServiceUnavailableError
from orchestrator.events import (
    Event,
    Finished,
    GenerationRequest,
    PromptLogprobs,
    ReasoningDelta,
    Speculation,
    TextDelta,
    TokenLogprob,
    ToolCall,
)
from orchestrator.models import ServedModel
from orchestrator.prefix_cache import CachePlan
from orchestrator.reasoning import ReasoningSplitter
from orchestrator.textstream import IncrementalDetokenizer, StopStringMatcher
from protocol import ErrorCode, GenerateSummary, PieceTable, TokenLogprobs

__all__ = [
    "MAX_RECOVERIES",
    "ChatPrompt",
    "cap_ends_turn",
    "chat_prompt",
    "completion_budget",
    "generate_events",
    "prepare_generation",
    "prompt_ids",
    "tokenize_text",
]

log = logging.getLogger("lucerna.generation")

MAX_RECOVERIES = 2
RESTART_WAIT_S = 120.0
CACHE_REFUSALS = frozenset({ErrorCode.SEQ_BUSY.value, ErrorCode.EMPTY_SLOT.value,
                            ErrorCode.SNAPSHOT_MISMATCH.value, ErrorCode.BAD_SLOT.value})
"""Refusals of a generation that only the prefix cache's choices (its sequence, its
``snap=`` or ``restore`` slot) can have earned: the request then runs again without the
cache."""
NO_CACHE = CachePlan(None, None, reuse=False, keep=False)


@dataclass(frozen=True)
class ChatPrompt:
    ids: list[int]
    marks: tuple[int, ...]
    """The end of the system part in ``ids`` (the first of ``message_boundaries``)."""
    text: str = ""
    """The rendered prompt."""


async def chat_prompt(
    model: ServedModel,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    variables: Mapping[str, Any] | None = None,
) -> ChatPrompt:
    """Render the chat template and tokenize it on the model's daemon, message by message.

    Each piece between two message boundaries is tokenized on its own, so the ids of a
    conversation's earlier messages are the same in every later turn (whatever the
    tokenizer would merge across a boundary), the boundaries are exact token positions,
    and pieces seen before come from the model's token memo without a round trip.
    """
    _, _, template = await model.ready_parts()
    if variables:  # e.g. enable_thinking=False
        template = dataclasses.replace(template, variables=variables)
    text = template.render(messages, add_generation_prompt=True, tools=tools)
    cuts = message_boundaries(template, messages, tools, text)
    ids: list[int] = []
    marks: list[int] = []
    start = 0
    for end in [*cuts, len(text)]:
        piece = text[start:end]
        first = start == 0
        key = (piece, first)
        piece_ids = model.token_memo.get(key)
        if piece_ids is None:
            piece_ids = await _piece_ids(model, piece, template.bos_token if first else None)
            model.remember_tokens(key, piece_ids)
        ids += piece_ids
        if end < len(text) and ids and not marks:
            # The end of the system part alone: many conversations share it. Every mark
            # splits the prefill, and on a GPU each forward has a fixed cost (on the
            # H200 a turn's ~60 new tokens cost 0.58 s in three forwards against 0.33 s
            # in one); the daemon checkpoints each prompt's end for the turn after it.
            marks.append(len(ids))
        start = end
    return ChatPrompt(ids, tuple(marks), text)


async def _piece_ids(model: ServedModel, piece: str, template_bos: str | None) -> list[int]:
    """One piece of a prompt as ids; a reply the model generated earlier, quoted in it,
    keeps the ids it was generated as. ``template_bos`` is set for the prompt's first
    piece only (which alone may get a BOS)."""
    reply = model.find_reply(piece)
    if reply is None:
        return await tokenize_text(model, piece, template_bos=template_bos or "",
                                   add_bos=None if template_bos is not None else False)
    at, text, reply_ids = reply
    before, after = piece[:at], piece[at + len(text):]
    ids = await _piece_ids(model, before, template_bos) if before else []
    ids += reply_ids
    if after:
        ids += await _piece_ids(model, after, None)
    return ids


async def prompt_ids(
    model: ServedModel,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """The ids of ``chat_prompt``."""
    return (await chat_prompt(model, messages, tools)).ids


async def tokenize_text(model: ServedModel, text: str, *, template_bos: str = "",
                        add_bos: bool | None = None) -> list[int]:
    # A template that writes the BOS text itself must not get a second BOS.
    if template_bos and text.startswith(template_bos):
        add_bos = False
    # A daemon that dies mid-tokenize is retried on its restart, as a generation is.
    died: DaemonDiedError | None = None
    for _ in range(MAX_RECOVERIES + 1):
        client = await model.supervisor.wait_ready()
        try:
            return await client.tokenize(text, special=True, add_bos=add_bos)
        except DaemonDiedError as exc:
            died = exc
    raise ServiceUnavailableError(f"model {model.name!r} is not available: {died}") from died


def completion_budget(model: ServedModel, request: GenerationRequest) -> int:
    """How many tokens may be generated; raises the 400s a request can earn."""
    n_ctx = model.context_limit
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
    wanted = request.max_tokens if request.max_tokens is not None else room
    # Like llama-server, a max_tokens beyond the context is clamped to what fits
    # rather than refused; finish_reason "length" tells the client it was cut. Scoring
    # the prompt (its logprobs) may generate nothing.
    return max(0 if request.prompt_logprobs else 1, min(wanted, room, model.output_cap))


def cap_ends_turn(model: ServedModel, request: GenerationRequest) -> bool:
    """Whether the server's output cap, not a smaller request limit nor the context,
    bounds this generation.

    Reaching that cap ends the turn as a stop (``stop``, Anthropic ``end_turn``,
    Responses ``completed``), not as ``length``: agents read a length stop as "your
    answer was cut, go on" (Claude Code re-asks three times, then fails the run; Codex
    fails on ``response.incomplete``), so a model that never stops on its own would
    fail every turn at a limit the server itself imposed. A request that asks for
    exactly the cap asks for all the server allows (the cap is what ``/v1/models``
    and ``/props`` advertise, and what ``lucerna clients`` configures Claude Code and
    OpenCode to send), so the cap ends it too. A smaller ``max_tokens`` and a full
    context still end in ``length``.
    """
    room = model.context_limit - len(request.prompt)
    wanted = request.max_tokens if request.max_tokens is not None else room
    return model.output_cap <= wanted and model.output_cap < room


async def prepare_generation(model: ServedModel, generation: GenerationRequest,
                             headers: Mapping[str, str]) -> GenerationRequest:
    """``generation`` as it will run: compressed by PFlash when the model has it
    (orchestrator/prefill; ``headers`` may steer it), then checked against the context,
    which raises the 400s a request can earn. Call it in the request's turn: the
    compression may park the target model."""
    if model.prefill is not None:
        generation = await model.prefill.apply(
            generation, headers, target=model, tokenize=functools.partial(prompt_ids, model))
    completion_budget(model, generation)
    if generation.lookup and model.launch.lookup is None:
        raise BadRequestError(f"model {model.name!r} serves no prompt lookup (its lookup "
                              'setting is "off"); leave lookup out, or set lookup = "opt-in" '
                              "in its config", param="lookup")
    return generation


async def generate_events(
    model: ServedModel, request: GenerationRequest, on_started: Callable[[], None] = lambda: None
) -> AsyncGenerator[Event, None]:
    """Run one generation, yielding text and tool calls as they become safe to show.

    Consume it with ``contextlib.aclosing``: leaving early (client gone, error)
    then stops the daemon's generation at once. ``on_started`` is called once the
    daemon (or the upstream server) has the request, so a streaming response can
    send its headers while the prompt is prefilled instead of before it is sent.
    """
    if model.prefill is not None and model.prefill.upstream is not None:
        # PFlash proxy mode (orchestrator/prefill): an upstream server generates, no daemon.
        if request.logprobs is not None:
            raise BadRequestError(f"model {model.name!r} is served by an upstream server "
                                  "(PFlash proxy mode), which gives no logprobs",
                                  param="logprobs")
        on_started()
        async with aclosing(model.prefill.upstream_events(request)) as upstream:
            async for event in upstream:
                model.observe(event)
                yield event
        return
    n_gen = completion_budget(model, request)
    _, pieces, template = await model.ready_parts()
    detokenizer = IncrementalDetokenizer(pieces)
    template_stops = template.stop_strings if request.template_stops else ()
    stops = StopStringMatcher((*request.stop_strings, *template_stops))
    parser = request.parser_factory() if request.parser_factory else None
    generated: list[int] = []
    recoveries = 0
    deaths_in_a_row, generated_at_death = 0, -1
    summary = None
    saw_tool_call = False
    plan = request.reasoning
    splitter = ReasoningSplitter(plan) if plan is not None else None
    reasoning_tokens = 0
    closed_by_budget = False

    def answer(text: str) -> list[TextDelta | ToolCall]:
        if not text:
            return []
        return parser.feed(text) if parser else [TextDelta(text)]

    def routed(pieces: list[tuple[bool, str]]) -> list[TextDelta | ReasoningDelta | ToolCall]:
        events: list[TextDelta | ReasoningDelta | ToolCall] = []
        for is_reasoning, piece in pieces:
            events += [ReasoningDelta(piece)] if is_reasoning else answer(piece)
        return events

    def visible(text: str) -> list[TextDelta | ReasoningDelta | ToolCall]:
        if splitter is None or not text:
            return list(answer(text))
        return routed(splitter.feed(text))

    def budget_spent() -> bool:
        """The reasoning budget is used up inside the block: the core closes it."""
        return (splitter is not None and splitter.reasoning and plan is not None
                and plan.budget is not None and reasoning_tokens >= plan.budget
                and not closed_by_budget)

    cache = model.prefix_cache
    cold = False  # the daemon refused what the cache set up: run without it
    client = None
    # The prompt's records come before any generated token, so a daemon that dies
    # after they were yielded leaves nothing of them to redo.
    prompt_scored = not request.prompt_logprobs
    while True:
        if budget_spent():
            # Close the block as the template writes it; the model goes on to the answer.
            assert plan is not None
            closed_by_budget = True
            closing = await tokenize_text(model, f"\n{plan.format.close}\n\n", add_bos=False)
            generated += closing
            for token in closing:
                for event in visible(stops.feed(detokenizer.feed(token))):
                    model.observe(event)
                    yield event
            if len(generated) >= n_gen:
                break
        try:
            if prompt_scored and len(generated) >= n_gen:
                break  # only the prompt's logprobs were asked for, and they are out
            client = await model.supervisor.wait_ready(RESTART_WAIT_S)
            prompt = request.prompt + generated
            use_cache = cache is not None and cache.enabled and not cold
            sequence: AbstractAsyncContextManager[int | None] = (
                cache.sequence(client, prompt) if cache is not None and use_cache
                else nullcontext(None))
            async with sequence as seq:
                setup = NO_CACHE
                if cache is not None and use_cache:
                    try:
                        setup = await cache.prepare(client, prompt, request.marks, seq)
                    except DaemonReplyError as exc:
                        # A slot command the daemon refused: this request runs cold.
                        log.warning("model %s: the prefix cache could not prepare this "
                                    "request (%s); prefilling it cold", model.name, exc)
                stream = None
                options: DecodeOptions = {
                    "sampling": request.sampling, "grammar": request.grammar,
                    "json_schema": request.json_schema, "snap": setup.snap,
                    "logprobs": request.logprobs, "lookup": request.lookup, "seq": seq}
                generate_options: DecodeOptions = {
                    **options, "reuse": setup.reuse, "marks": request.marks,
                    "prompt_logprobs": not prompt_scored}
                try:
                    # A slot's positions have no logits: prompt logprobs prefill it all.
                    async with (
                        client.restore(setup.restore, prompt, n_gen - len(generated), **options)
                        if setup.restore is not None and prompt_scored else
                        client.generate(prompt, n_gen - len(generated),
                                        **generate_options)
                    ) as stream:
                        on_started()
                        if not prompt_scored:
                            records = await stream.read_prompt_logprobs()
                            prompt_scored = True
                            scored = PromptLogprobs(
                                tuple(_token_logprob(pieces, r) for r in records))
                            model.observe(scored)
                            yield scored
                        async for token in stream:
                            generated.append(token)
                            if splitter is not None and splitter.reasoning:
                                reasoning_tokens += 1
                            if stream.logprobs is not None:
                                yield _token_logprob(pieces, stream.logprobs)
                            for event in visible(stops.feed(detokenizer.feed(token))):
                                saw_tool_call |= isinstance(event, ToolCall)
                                model.observe(event)
                                yield event
                            if stops.stopped or budget_spent():
                                break
                finally:
                    if cache is not None and use_cache:
                        cache.after_generate(request.prompt, generated,
                                             stream.summary if stream else None, setup.snap,
                                             seq)
                if cache is not None and setup.keep and stream.summary is not None:
                    try:
                        await cache.keep_sequence(client, seq)
                    except (DaemonDiedError, DaemonReplyError) as exc:
                        # The generation is complete: nothing to resume, only less kept.
                        log.warning("model %s: the prefix cache could not keep this "
                                    "conversation: %s", model.name, exc)
            summary = stream.summary
            if budget_spent():
                continue
            if summary is not None and summary.finish.value != "cancelled":
                model.remember_reply(generated)
            break
        except DaemonDiedError as exc:
            deaths_in_a_row = 1 if len(generated) > generated_at_death else deaths_in_a_row + 1
            generated_at_death = len(generated)
            if deaths_in_a_row > MAX_RECOVERIES:
                log.error("model %s: poison request: its daemon died %d times in a row under "
                          "it with no token between (prompt %d tokens, %d generated, %s; "
                          "last: %s)", model.name, deaths_in_a_row, len(request.prompt),
                          len(generated), request.sampling, exc)
                raise ServiceUnavailableError(
                    f"model {model.name!r} became unavailable during generation: its daemon "
                    f"died {deaths_in_a_row} times in a row under this request ({exc})"
                ) from exc
            recoveries += 1
            log.warning("model %s: daemon died mid-request after %d generated tokens; %s on "
                        "the restarted daemon", model.name, len(generated),
                        "resuming" if generated else "retrying")
        except DaemonReplyError as exc:
            if exc.code == "context_overflow":
                raise ContextLengthError(exc.detail, param="messages") from exc
            if exc.code in CACHE_REFUSALS and not cold and cache is not None and cache.enabled:
                # Refused before it ran (nothing was streamed): never lose the request
                # to the cache's bookkeeping, prefill it cold instead.
                log.warning("model %s: the daemon refused the prefix cache's setup (%s); "
                            "running this request without the cache", model.name, exc)
                cold = True
                continue
            raise
    if cache and client is not None:
        try:
            await cache.settle(client)
        except (DaemonDiedError, DaemonReplyError) as exc:
            log.warning("model %s: the prefix cache could not book this generation: %s",
                        model.name, exc)
    tail = "" if stops.stopped else stops.feed(detokenizer.flush()) + stops.flush()
    rest = routed(splitter.finish()) if splitter is not None else []
    for event in [*visible(tail), *rest, *(parser.finish() if parser else [])]:
        saw_tool_call |= isinstance(event, ToolCall)
        model.observe(event)
        yield event
    natural_end = summary is not None and summary.finish in ("eog", "stop")
    capped = False
    if saw_tool_call:
        finish_reason = "tool_calls"
    elif stops.stopped or natural_end:
        finish_reason = "stop"
    elif cap_ends_turn(model, request):
        finish_reason, capped = "stop", True
        log.info("model %s: reached the output cap of %d tokens; the turn ends there",
                 model.name, model.output_cap)
    else:
        finish_reason = "length"
    finished = Finished(
        finish_reason=finish_reason,
        prompt_tokens=len(request.prompt),
        completion_tokens=len(generated),
        prefill_ms=summary.prefill_ms if summary else 0.0,
        decode_ms=summary.decode_ms if summary else 0.0,
        recoveries=recoveries,
        stop_string=stops.matched if stops.matched in request.stop_strings else None,
        compressed_tokens=request.compressed_tokens,
        speculative=_speculation(summary),
        capped=capped,
        cached_tokens=min(len(request.prompt), summary.prompt_tokens_reused) if summary else 0,
        reasoning_tokens=reasoning_tokens,
    )
    model.observe(finished)
    yield finished


def _token_logprob(pieces: PieceTable, record: TokenLogprobs) -> TokenLogprob:
    return TokenLogprob(pieces.pieces[record.token], record.logprob,
                        tuple((pieces.pieces[alt], logprob) for alt, logprob in record.top))


def _speculation(summary: GenerateSummary | None) -> Speculation | None:
    if summary is None or summary.draft_steps is None or summary.spec == "none":
        return None  # not speculative, or no proposer ran for this request
    return Speculation(draft_steps=summary.draft_steps, proposed=summary.draft_proposed or 0,
                       accepted=summary.draft_accepted or 0, method=summary.spec,
                       tree_steps=summary.tree_steps)
