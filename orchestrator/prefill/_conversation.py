"""Compress a conversation with a pflash drafter: the daemon-facing half of PFlash.

What is compressed is the text of the messages, not the rendered prompt: every
message's content is tokenized with the drafter's own vocabulary, the contents are
scored together as one sequence (each preceded by a short role label, so the
drafter sees who says what, and ending with the last message, whose final tokens
are the queries that score everything before them), and each message gets back the
text of what it kept. The target's chat template is applied afterwards to the
shortened messages, so its control tokens never pass through the drafter's
vocabulary, which may not have them: drafter and target may tokenize differently,
text is the only thing that crosses.

``drafter_turn`` is the park/unpark choreography for a drafter and a target that
share one device and cannot both hold their weights and contexts at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from daemons.client import DaemonClient
from daemons.errors import DaemonError
from orchestrator.chat_template import flatten_content
from orchestrator.prefill._roundtrip import (
    Span,
    align_kept,
    kept_runs,
    repair_word_cuts,
    restore_query,
    runs_text,
)
from orchestrator.prefill._settings import CompressOptions
from protocol import PieceTable

__all__ = ["CompressedConversation", "CompressionSkipped", "compress_conversation",
           "drafter_turn"]

log = logging.getLogger("lucerna.prefill")


class CompressionSkipped(Exception):
    """The conversation could not be compressed; the caller serves it as it is."""


@dataclass(frozen=True)
class CompressedConversation:
    messages: list[dict[str, Any]]
    n_scored: int
    """Drafter tokens scored (message contents plus role labels)."""
    n_content: int
    """Drafter tokens of the message contents."""
    n_kept: int
    """Content tokens kept, re-appended and repaired ones included."""
    keep_x1000: int
    compress_ms: float
    """The drafter's ``compress`` alone (park and unpark included when they ran)."""
    total_ms: float
    """Everything: tokenizing, scoring, alignment, text."""
    requeried: str | None
    """``"whole"`` or ``"tail"`` when the last user message was re-appended."""
    repaired: int
    """Tokens added to finish words cut at run boundaries."""


def _label(role: str, first: bool) -> str:
    return ("" if first else "\n\n") + f"{role.capitalize()}: "


def _text_of(content: Any) -> str:
    return "" if content is None or (isinstance(content, str | list) and not content) else (
        flatten_content(content))


async def _scored_sequence(drafter: DaemonClient, messages: Sequence[Mapping[str, Any]],
                           texts: Mapping[int, str]) -> tuple[list[int], dict[int, Span]]:
    """The drafter's tokens of every message text, each after its role label; where
    each text lies in them."""
    ready = drafter.ready
    assert ready is not None
    ids: list[int] = [ready.bos] if ready.add_bos and ready.bos >= 0 else []
    spans: dict[int, Span] = {}
    labels: dict[tuple[str, bool], list[int]] = {}
    for i, text in texts.items():
        key = (str(messages[i].get("role", "user")), not spans)
        if key not in labels:
            labels[key] = await drafter.tokenize(_label(*key), special=False, add_bos=False)
        ids.extend(labels[key])
        content_ids = await drafter.tokenize(text, special=False, add_bos=False)
        spans[i] = Span(len(ids), len(ids) + len(content_ids))
        ids.extend(content_ids)
    return ids, spans


async def compress_conversation(
    drafter: DaemonClient,
    pieces: PieceTable,
    messages: Sequence[Mapping[str, Any]],
    keep_x1000: int,
    options: CompressOptions,
    *,
    target: DaemonClient | None = None,
    park_target: bool = False,
) -> CompressedConversation:
    """The messages with their contents compressed to about ``keep_x1000``/1000.

    With ``park_target`` the ``target`` is parked while the drafter scores (see
    ``drafter_turn``). Raises CompressionSkipped when there is nothing to compress or
    the drafter cannot take it (its context is too small); daemon errors propagate.
    """
    started = time.perf_counter()
    texts = {i: text for i, message in enumerate(messages)
             if (text := _text_of(message.get("content")))}
    if not texts:
        raise CompressionSkipped("no message has text to compress")
    # Shielded: compress cannot be cancelled half-way (the protocol's cancel stops
    # generate only), and a command abandoned in mid-reply would leave its stream
    # values and reply line to the next one. A request whose client leaves waits here.
    with trio.CancelScope(shield=True):
        ids, spans = await _scored_sequence(drafter, messages, texts)
        ready = drafter.ready
        assert ready is not None
        if len(ids) > ready.n_ctx:
            raise CompressionSkipped(
                f"the conversation is {len(ids)} drafter tokens, more than the drafter's "
                f"n_ctx of {ready.n_ctx} (raise the prefill n_ctx)")
        scoring_started = time.perf_counter()
        async with drafter_turn(drafter, target, park=park_target):
            kept = await drafter.compress(ids, keep_x1000, lookahead=options.lookahead,
                                          chunk=options.chunk, pool=options.pool,
                                          segment=options.segment)
        compress_ms = (time.perf_counter() - scoring_started) * 1000
    n_content = sum(len(span) for span in spans.values())

    mask = align_kept(ids, kept, options.chunk)
    if mask is None:
        raise CompressionSkipped("the drafter's kept ids are not a subsequence of its input")
    last_user = max((i for i in spans if messages[i].get("role") == "user"), default=None)
    requeried = None
    if last_user is not None:
        requeried = restore_query(mask, spans[last_user], ratio=options.requery_ratio,
                                  max_tokens=options.requery_max_tokens,
                                  tail_tokens=options.requery_tail_tokens)
    repaired = 0
    result = [dict(message) for message in messages]
    n_kept = 0
    for i, span in spans.items():
        repaired += repair_word_cuts(mask, span, ids, pieces.pieces,
                                     max_tokens=options.repair_max_tokens)
        runs = kept_runs(mask, span)
        n_kept += sum(end - start for start, end in runs)
        text = runs_text(runs, ids, pieces.pieces)
        # A tokenizer that adds a "dummy prefix" space to the first word would otherwise
        # give every message a leading space it did not have.
        if runs and runs[0][0] == span.start and text.startswith(" ") and not texts[i].startswith(
                " "):
            text = text[1:]
        result[i]["content"] = text
    return CompressedConversation(
        messages=result,
        n_scored=len(ids),
        n_content=n_content,
        n_kept=n_kept,
        keep_x1000=keep_x1000,
        compress_ms=compress_ms,
        total_ms=(time.perf_counter() - started) * 1000,
        requeried=requeried,
        repaired=repaired,
    )


@asynccontextmanager
async def drafter_turn(drafter: DaemonClient, target: DaemonClient | None, *,
                       park: bool) -> AsyncIterator[None]:
    """Room on the device for the drafter while the block runs.

    With ``park``: the target is parked (weights and context released) and the drafter
    woken; afterwards the drafter is parked again and the target restored, always, in
    that order, so the two are never both resident. Without it nothing happens: both
    stay loaded (the flag exists for devices that cannot hold both).
    """
    if not park:
        yield
        return
    with trio.CancelScope(shield=True):
        if target is not None:
            await target.park("all")
        await drafter.unpark("all")
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            try:
                await drafter.park("all")
            except DaemonError as exc:
                log.error("could not park the drafter after compress: %s", exc)
            if target is not None:
                try:
                    await target.unpark("all")
                except DaemonError as exc:
                    # The generation that follows fails or recovers on its own (a dead
                    # daemon is restarted by its supervisor); say why here.
                    log.error("could not unpark the target after compress: %s", exc)
