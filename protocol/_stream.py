"""Reading the stream fd without doing I/O (PROTOCOL.md sections 1, 5.1 and 7).

Every stream command writes int32 little-endian values and then exactly one ``-1``.
Pipes return short reads, so a read may end inside a value: :class:`TokenStreamReader`
keeps the partial bytes until the rest arrives and hands out whole ids only. A
``generate ... logprobs=K`` writes fixed-size records instead of bare ids;
:class:`LogprobStreamReader` reads those.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from ._codes import MAX_LOGPROBS, STREAM_END
from .errors import StreamFramingError

__all__ = ["LogprobStreamReader", "TokenLogprobs", "TokenStreamReader"]


class TokenStreamReader:
    """Turn the stream-fd bytes of one stream command into token ids.

    Feed it whatever the fd returned; it returns the ids completed by that chunk, and
    :attr:`finished` turns True once the ``-1`` arrives (the ``-1`` itself is never
    returned). Call :meth:`reset` before the next stream command.

    Example::

        reader = TokenStreamReader()
        while not reader.finished:
            ids = reader.feed(await stream.receive_some(4096))
    """

    __slots__ = ("_buffer", "_count", "_finished")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._count = 0
        self._finished = False

    @property
    def finished(self) -> bool:
        """True once the ``-1`` terminator has been read."""
        return self._finished

    @property
    def count(self) -> int:
        """How many ids this command has produced so far."""
        return self._count

    @property
    def buffered(self) -> int:
        """Bytes held back because they do not yet make a whole int32 (0 to 3)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """Consume ``data`` and return the ids it completes, in order.

        Raises:
            StreamFramingError: ``data`` holds bytes after the ``-1`` (or arrives once
                finished), or a negative value other than ``-1``. The reader is then
                broken for this command; :meth:`reset` before reusing it.
        """
        if self._finished:
            if data:
                raise StreamFramingError(
                    f"{len(data)} byte(s) on the stream fd after the -1 terminator"
                )
            return []
        self._buffer += data
        whole = len(self._buffer) - len(self._buffer) % 4
        values = struct.unpack_from(f"<{whole // 4}i", self._buffer)
        del self._buffer[:whole]
        ids: list[int] = []
        for index, value in enumerate(values):
            if value >= 0:
                ids.append(value)
                continue
            if value != STREAM_END:
                raise StreamFramingError(f"negative value {value} on the stream fd")
            self._finished = True
            extra = (len(values) - index - 1) * 4 + len(self._buffer)
            if extra:
                raise StreamFramingError(
                    f"{extra} byte(s) on the stream fd after the -1 terminator"
                )
            break
        self._count += len(ids)
        return ids

    def reset(self) -> None:
        """Forget everything: ready for the next stream command."""
        self._buffer.clear()
        self._count = 0
        self._finished = False

    def __repr__(self) -> str:
        return (
            f"<TokenStreamReader count={self._count} buffered={len(self._buffer)}"
            f" finished={self._finished}>"
        )


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """One generated token with its log-probability and the ``K`` most likely tokens'.

    ``top`` is ``(id, logprob)`` pairs, most likely first (ties: lower id first).
    """

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]

    def encode(self) -> bytes:
        """The record as a daemon writes it (section 5.1)."""
        words = [struct.pack("<i", self.token), struct.pack("<f", self.logprob)]
        for alt, logprob in self.top:
            words += [struct.pack("<i", alt), struct.pack("<f", logprob)]
        return b"".join(words)


class LogprobStreamReader:
    """Turn the stream-fd bytes of a ``generate ... logprobs=K`` into :class:`TokenLogprobs`.

    Each token is one record of ``2 + 2K`` int32 words: the id, its log-probability
    (float32 bits), then ``K`` pairs of id and log-probability. ``-1`` may only stand
    where a record would start; inside a record a float's bits may read as any int32.
    """

    __slots__ = ("_buffer", "_count", "_finished", "top_k")

    def __init__(self, top_k: int) -> None:
        if not 0 <= top_k <= MAX_LOGPROBS:
            raise ValueError(f"top_k must be in [0, {MAX_LOGPROBS}], got {top_k}")
        self.top_k = top_k
        self._buffer = bytearray()
        self._count = 0
        self._finished = False

    @property
    def finished(self) -> bool:
        """True once the ``-1`` terminator has been read."""
        return self._finished

    @property
    def count(self) -> int:
        """How many records this command has produced so far."""
        return self._count

    def feed(self, data: bytes | bytearray | memoryview) -> list[TokenLogprobs]:
        """Consume ``data`` and return the records it completes, in order.

        Raises:
            StreamFramingError: bytes after the ``-1``, a negative id, or a
                log-probability that is NaN or above 0.
        """
        if self._finished:
            if data:
                raise StreamFramingError(
                    f"{len(data)} byte(s) on the stream fd after the -1 terminator"
                )
            return []
        self._buffer += data
        size = 8 + 8 * self.top_k
        records: list[TokenLogprobs] = []
        at = 0
        while len(self._buffer) - at >= 4:
            (first,) = struct.unpack_from("<i", self._buffer, at)
            if first == STREAM_END:
                self._finished = True
                extra = len(self._buffer) - at - 4
                if extra:
                    raise StreamFramingError(
                        f"{extra} byte(s) on the stream fd after the -1 terminator"
                    )
                at += 4
                break
            if first < 0:
                raise StreamFramingError(f"negative value {first} on the stream fd")
            if len(self._buffer) - at < size:
                break
            words = struct.unpack_from("<if" + "if" * self.top_k, self._buffer, at)
            at += size
            top = tuple(zip(words[2::2], words[3::2], strict=True))
            for alt, logprob in [(first, words[1]), *top]:
                if alt < 0:
                    raise StreamFramingError(f"negative id {alt} in a logprobs record")
                if math.isnan(logprob) or logprob > 0.0:
                    raise StreamFramingError(f"log-probability {logprob} is not <= 0")
            records.append(TokenLogprobs(first, words[1], top))
        del self._buffer[:at]
        self._count += len(records)
        return records

    def reset(self) -> None:
        """Forget everything: ready for the next stream command."""
        self._buffer.clear()
        self._count = 0
        self._finished = False

    def __repr__(self) -> str:
        return (
            f"<LogprobStreamReader top_k={self.top_k} count={self._count}"
            f" buffered={len(self._buffer)} finished={self._finished}>"
        )
