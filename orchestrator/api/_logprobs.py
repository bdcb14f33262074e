"""Logprobs in the OpenAI dialects: which request fields ask for them, and their shapes.

The values are the daemon's (PROTOCOL.md 5.1): the model's own distribution at each
step, the log-softmax of the raw logits before penalties, grammar, truncation and
temperature, as OpenAI reports them. A token is shown as its piece: ``token`` is its
bytes read as UTF-8 (a piece that splits a character reads with U+FFFD) and ``bytes``
the exact bytes, as OpenAI gives both.

- Chat Completions: ``logprobs: true`` and ``top_logprobs`` (0-20) give
  ``choices[0].logprobs.content``, one entry per token, streamed with the content
  delta its text is in (a token whose text is still held back, by a stop string that
  might match, goes with the next delta or the last chunk).
- Legacy Completions: ``logprobs`` (0-5, OpenAI's bound; up to 20 here) gives
  ``tokens``, ``token_logprobs``, ``top_logprobs`` and ``text_offset``. With ``echo``
  the prompt's tokens come first (the daemon's ``prompt_logprobs``), the first with
  ``null`` value and alternatives since nothing predicts it; ``text_offset`` counts
  characters of the returned text, prompt included.
- Responses: ``include: ["message.output_text.logprobs"]`` with ``top_logprobs``
  gives ``logprobs`` on each ``output_text`` part and ``output_text.delta`` event.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.api import _fields as fields
from orchestrator.errors import BadRequestError
from orchestrator.events import TokenLogprob
from protocol import MAX_LOGPROBS

__all__ = [
    "RESPONSES_INCLUDE",
    "chat_entry",
    "chat_logprobs",
    "completions_block",
    "completions_echo_block",
    "completions_logprobs",
    "responses_logprobs",
]

RESPONSES_INCLUDE = "message.output_text.logprobs"
_COMPLETIONS_BOUND = MAX_LOGPROBS


def chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """``K`` alternatives per token, or None when the request asks for no logprobs."""
    wanted = fields.boolean(body, "logprobs")
    top = fields.integer(body, "top_logprobs", 0, MAX_LOGPROBS)
    if top is not None and not wanted:
        raise BadRequestError("top_logprobs needs logprobs: true", param="top_logprobs")
    return (top or 0) if wanted else None


def completions_logprobs(body: Mapping[str, Any]) -> int | None:
    value = body.get("logprobs")
    if value is None or value is False:
        return None
    return fields.integer(body, "logprobs", 0, _COMPLETIONS_BOUND)


def responses_logprobs(body: Mapping[str, Any]) -> int | None:
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        raise BadRequestError("include must be an array of strings", param="include")
    top = fields.integer(body, "top_logprobs", 0, MAX_LOGPROBS)
    return (top or 0) if RESPONSES_INCLUDE in include else None


def _token(piece: bytes) -> dict[str, Any]:
    return {"token": piece.decode("utf-8", errors="replace"), "bytes": list(piece)}


def chat_entry(logprob: TokenLogprob) -> dict[str, Any]:
    """One token as Chat Completions and Responses show it."""
    return {**_token(logprob.token), "logprob": logprob.logprob,
            "top_logprobs": [{**_token(piece), "logprob": value}
                             for piece, value in logprob.top]}


def completions_block(logprobs: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    """The legacy ``logprobs`` object; ``offset`` is where the first token's text starts."""
    tokens = [lp.token.decode("utf-8", errors="replace") for lp in logprobs]
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": [lp.logprob for lp in logprobs],
        "top_logprobs": [{piece.decode("utf-8", errors="replace"): value
                          for piece, value in lp.top} for lp in logprobs],
        "text_offset": offsets,
    }


def completions_echo_block(first: bytes, scored: Sequence[TokenLogprob], echoed: str, *,
                           first_shown: bool) -> dict[str, Any]:
    """The legacy ``logprobs`` object of an echoed prompt: its first token, whose value
    and alternatives are ``null`` (nothing predicts it), then each scored token.

    ``text_offset`` counts characters of ``echoed`` (the prompt as the response shows
    it): each token starts where the bytes before it end, a token inside a character
    at that character. A first token the echo does not show (``first_shown`` false: a
    BOS the tokenizer added to a text prompt) takes no room.
    """
    pieces = [first, *(lp.token for lp in scored)]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    offsets, chars = [], 0
    for index, piece in enumerate(pieces):
        offsets.append(min(chars, len(echoed)))
        if index > 0 or first_shown:
            chars += len(decoder.decode(piece))
    return {
        "tokens": [piece.decode("utf-8", errors="replace") for piece in pieces],
        "token_logprobs": [None, *(lp.logprob for lp in scored)],
        "top_logprobs": [None, *({piece.decode("utf-8", errors="replace"): value
                                  for piece, value in lp.top} for lp in scored)],
        "text_offset": offsets,
    }
