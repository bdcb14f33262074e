"""Reading the stream fd without doing I/O (PROTOCOL.md sections 1 and 7).

Every stream command writes int32 little-endian values and then exactly one ``-1``.
Pipes return short reads, so a read may end inside a value: :class:`TokenStreamReader`
keeps the partial bytes until the rest arrives and hands out whole ids only.
"""

from __future__ import annotations

import struct

from ._codes import STREAM_END
from .errors import StreamFramingError

__all__ = ["TokenStreamReader"]


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
