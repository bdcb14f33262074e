"""From the drafter's kept ids back to text: alignment, word repair, query survival.

Sans-IO. ``compress`` (PROTOCOL.md 5.7) answers with the kept ids only, so the first
step finds which positions of the scored sequence they are. Its contract (whole
chunks of ``chunk`` tokens, in order, the first and last chunk always included)
makes that exact up to identical chunks, where the earliest fitting one is taken,
which changes no text; a reply that breaks the contract falls back to greedy
subsequence matching.

Positions live in a ``bytearray`` mask (1 = kept) over the scored sequence, so that
the later steps can add to what the drafter kept:

- the survival rule: the user's last message (where the question is) that kept
  less than ``requery_ratio`` of its tokens is re-appended, i.e. restored in place,
  which is the end of the prompt when it is the last message; a message longer than
  ``requery_max_tokens`` gets only its last ``requery_tail_tokens`` back;
- word repair: a kept run that starts or ends inside a word (``" 73"`` kept, ``"41"``
  dropped) grows to the word's edge, so a multi-token needle such as a number reaches
  the target whole, whatever the target's tokenizer makes of it.

Text is then the kept runs' piece bytes (the drafter's piece table, 5.2), with a
space or a newline where text was dropped between two runs.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Span", "align_kept", "kept_runs", "repair_word_cuts", "restore_query", "runs_text"]


@dataclass(frozen=True)
class Span:
    """A message's content inside the scored sequence: positions ``[start, end)``."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def align_kept(source: Sequence[int], kept: Sequence[int], chunk: int) -> bytearray | None:
    """The mask of ``source`` positions that ``kept`` consists of; None if it is not a
    subsequence at all (the caller then leaves the prompt uncompressed)."""
    return _align_chunks(source, kept, chunk) or _align_greedy(source, kept)


def _align_chunks(source: Sequence[int], kept: Sequence[int], chunk: int) -> bytearray | None:
    n = len(source)
    if chunk < 1 or n == 0:
        return None
    n_chunks = (n + chunk - 1) // chunk
    last_len = n - (n_chunks - 1) * chunk
    where: dict[tuple[int, ...], list[int]] = {}
    for c in range(n_chunks):
        where.setdefault(tuple(source[c * chunk:(c + 1) * chunk]), []).append(c)
    mask = bytearray(n)
    k, previous = 0, -1
    while k < len(kept):
        length = last_len if len(kept) - k == last_len else chunk
        candidates = where.get(tuple(kept[k:k + length]), [])
        i = bisect.bisect_right(candidates, previous)
        if i == len(candidates):
            return None
        previous = candidates[i]
        start = previous * chunk
        if min(n, start + chunk) - start != length:
            return None
        mask[start:start + length] = b"\x01" * length
        k += length
    return mask


def _align_greedy(source: Sequence[int], kept: Sequence[int]) -> bytearray | None:
    mask = bytearray(len(source))
    p = 0
    for token in kept:
        while p < len(source) and source[p] != token:
            p += 1
        if p == len(source):
            return None
        mask[p] = 1
        p += 1
    return mask


def kept_runs(mask: bytearray, span: Span) -> list[tuple[int, int]]:
    """The maximal kept runs ``[start, end)`` inside ``span``."""
    runs: list[tuple[int, int]] = []
    i = span.start
    while i < span.end:
        if mask[i]:
            j = i
            while j < span.end and mask[j]:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def restore_query(mask: bytearray, span: Span, *, ratio: float, max_tokens: int,
                  tail_tokens: int) -> str | None:
    """Apply the survival rule to the user's last message; says what it restored."""
    if not len(span):
        return None
    survived = sum(mask[span.start:span.end]) / len(span)
    if survived >= ratio:
        return None
    if len(span) <= max_tokens:
        mask[span.start:span.end] = b"\x01" * len(span)
        return "whole"
    start = max(span.start, span.end - tail_tokens)
    mask[start:span.end] = b"\x01" * (span.end - start)
    return "tail"


def _is_word_byte(byte: int) -> bool:
    # Bytes >= 0x80 are parts of non-ASCII characters: treated as word bytes, repair
    # never leaves a run ending inside a multi-byte character either.
    return byte >= 0x80 or byte == 0x5F or 0x30 <= byte <= 0x39 or 0x41 <= byte <= 0x5A or (
        0x61 <= byte <= 0x7A)


# Punctuation that joins what surrounds it into one word: 3.14, 4,729,105, town's, x-ray.
_JOINERS = frozenset(b".,'-")


def _inside_word(text: bytes, at: int) -> bool:
    """Whether a cut of ``text`` before byte ``at`` falls inside a word."""
    if at <= 0 or at >= len(text):
        return False
    left, right = text[at - 1], text[at]
    if _is_word_byte(left) and _is_word_byte(right):
        return True
    if _is_word_byte(left) and right in _JOINERS:
        return at + 1 < len(text) and _is_word_byte(text[at + 1])
    if left in _JOINERS and _is_word_byte(right):
        return at >= 2 and _is_word_byte(text[at - 2])
    return False


def repair_word_cuts(mask: bytearray, span: Span, ids: Sequence[int],
                     pieces: Sequence[bytes], *, max_tokens: int) -> int:
    """Grow every kept run in ``span`` to whole words (at most ``max_tokens`` each way).

    A word here is letters, digits and non-ASCII characters, with ``.``, ``,``, ``'``
    and ``-`` inside it (numbers with separators, contractions). Returns how many tokens
    were added.
    """
    text = b"".join(pieces[t] for t in ids[span.start:span.end])
    offsets = [0]  # offsets[k]: where token span.start + k begins in text
    for t in ids[span.start:span.end]:
        offsets.append(offsets[-1] + len(pieces[t]))

    def cut_inside(position: int) -> bool:  # a cut between tokens position - 1 and position
        return _inside_word(text, offsets[position - span.start])

    added = 0
    for start, end in kept_runs(mask, span):
        s, steps = start, 0
        while s > span.start and not mask[s - 1] and steps < max_tokens and cut_inside(s):
            s -= 1
            steps += 1
            mask[s] = 1
        e, steps = end, 0
        while e < span.end and not mask[e] and steps < max_tokens and cut_inside(e):
            mask[e] = 1
            e += 1
            steps += 1
        added += (start - s) + (e - end)
    return added


def runs_text(runs: Sequence[tuple[int, int]], ids: Sequence[int],
              pieces: Sequence[bytes]) -> str:
    """The kept runs as one text; a dropped gap becomes a newline if it held one, else a
    space, unless the runs already meet at whitespace."""
    parts: list[str] = []
    previous_end: int | None = None
    for start, end in runs:
        text = b"".join(pieces[t] for t in ids[start:end]).decode("utf-8", errors="replace")
        if previous_end is not None and parts:
            gap = b"".join(pieces[t] for t in ids[previous_end:start])
            joined_by_space = parts[-1][-1:].isspace() or text[:1].isspace()
            if b"\n" in gap and not (parts[-1].endswith("\n") or text.startswith("\n")):
                parts.append("\n")
            elif not joined_by_space:
                parts.append(" ")
        parts.append(text)
        previous_end = end
    return "".join(parts)
