"""From token ids to the text a client sees: incremental UTF-8 and stop strings.

Both classes are sans-IO and per request. A token's piece may end inside a UTF-8
sequence (byte-fallback tokens, emoji split over tokens), so bytes are decoded
incrementally; a stop string may straddle tokens, so text that could still turn
into a stop string is held back until it is known not to.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from protocol import PieceTable

__all__ = ["IncrementalDetokenizer", "StopStringMatcher"]


class IncrementalDetokenizer:
    """Turns generated ids into text as they arrive, hiding control tokens."""

    def __init__(self, pieces: PieceTable) -> None:
        self._pieces = pieces
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        if token < 0 or token >= self._pieces.n_vocab or self._pieces.is_control(token):
            return ""
        return str(self._decoder.decode(self._pieces.pieces[token]))

    def flush(self) -> str:
        return str(self._decoder.decode(b"", final=True))


class StopStringMatcher:
    """Finds the first stop string in streamed text.

    ``feed`` returns the text that is safe to show now; once a stop string has been
    seen, ``stopped`` is True, ``matched`` is the stop string, and the text from the
    stop string on is dropped, as the OpenAI API does.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self._stops:
            return text
        buffer = self._held + text
        first, self.matched = min(
            ((i, s) for s, i in ((s, buffer.find(s)) for s in self._stops) if i >= 0),
            default=(-1, None),
        )
        if first >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:first]
        keep = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """At the end of generation nothing can complete a stop string any more."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_partial_suffix(self, buffer: str) -> int:
        best = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(buffer)), best, -1):
                if stop.startswith(buffer[-length:]):
                    best = length
                    break
        return best
