"""One channel (PROTOCOL.md section 10): replies and stream bytes share the daemon's stdout.

A daemon started with ``--channel=stdout`` writes no stream fd. Its stdout carries three
kinds of unit, each starting at a line boundary::

    ready ... | ok ... | err ... | done ...     a protocol line, exactly as on two channels
    @stream N                                  then N raw bytes: stream fd bytes, in order
    @alive                                     a keep-alive, every --keepalive-ms

No protocol line starts with ``@``, so ``ChannelReader`` tells them apart by the first
byte of a line; the stream bytes, joined, are exactly what the stream fd would have
carried (protocol 1's values and ``-1``, or protocol 2's records), and are decoded by
the same readers (``TokenStreamReader``, ``FramedStreamReader``).

Sans I/O: ``ChannelReader.feed`` takes bytes as they arrive and returns the units it
completed; ``encode_stream_frame`` and ``encode_alive`` write them (for test doubles).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ChannelFramingError

__all__ = [
    "CHANNEL_ALIVE_LINE",
    "CHANNEL_STREAM_WORD",
    "ChannelAlive",
    "ChannelLine",
    "ChannelReader",
    "ChannelStream",
    "ChannelUnit",
    "encode_alive",
    "encode_stream_frame",
]

CHANNEL_STREAM_WORD = "@stream"
"""The word of a stream frame's header line (``@stream N``); native/src/wire/constants.h."""
CHANNEL_ALIVE_LINE = "@alive"
"""The keep-alive line; native/src/wire/constants.h."""

_STREAM_PREFIX = CHANNEL_STREAM_WORD.encode() + b" "
_ALIVE = CHANNEL_ALIVE_LINE.encode()
# A frame header is "@stream " and at most this many digits: the daemon writes one
# frame per write of values, far below a gigabyte; anything longer is not a header.
_MAX_LENGTH_DIGITS = 10
_MAX_HEADER = len(_STREAM_PREFIX) + _MAX_LENGTH_DIGITS


@dataclass(frozen=True, slots=True)
class ChannelLine:
    """A protocol line (ready, ``ok``, ``err``, ``done``), without its newline."""

    line: bytes


@dataclass(frozen=True, slots=True)
class ChannelStream:
    """Bytes of the stream, in the order the stream fd would have carried them."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelAlive:
    """A keep-alive: the daemon (and the link to it) is there."""


ChannelUnit = ChannelLine | ChannelStream | ChannelAlive


def encode_stream_frame(data: bytes) -> bytes:
    """A stream frame: its header line and ``data``."""
    return _STREAM_PREFIX + str(len(data)).encode() + b"\n" + data


def encode_alive() -> bytes:
    return _ALIVE + b"\n"


class ChannelReader:
    """Splits one-channel stdout into ``ChannelUnit``s, whatever the chunking of the bytes.

    A frame's bytes come out as they arrive (a partial ``ChannelStream``), so a token is
    never held back until its frame is whole. ``ChannelFramingError`` on a line that
    starts with ``@`` but is no unit of section 10, and on EOF inside a frame.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._frame_left = 0
        """Bytes of the current stream frame still to come (0: at a line boundary)."""

    @property
    def at_boundary(self) -> bool:
        """Whether the bytes so far end at a unit boundary (EOF there is clean)."""
        return self._frame_left == 0 and not self._buffer

    def feed(self, data: bytes | bytearray) -> list[ChannelUnit]:
        self._buffer += data
        units: list[ChannelUnit] = []
        while self._buffer:
            if self._frame_left:
                take = min(self._frame_left, len(self._buffer))
                units.append(ChannelStream(bytes(self._buffer[:take])))
                del self._buffer[:take]
                self._frame_left -= take
                continue
            newline = self._buffer.find(b"\n")
            if newline < 0:
                if self._buffer[:1] == b"@" and len(self._buffer) > _MAX_HEADER:
                    raise ChannelFramingError(
                        f"a line starting with '@' is longer than any unit header: "
                        f"{bytes(self._buffer[:_MAX_HEADER + 1])!r}")
                break
            line = bytes(self._buffer[:newline]).rstrip(b"\r")
            del self._buffer[: newline + 1]
            units.extend(self._line(line))
        return units

    def eof(self) -> list[ChannelUnit]:
        """The end of stdout: a last line without its newline, if any."""
        if self._frame_left:
            raise ChannelFramingError(
                f"stdout ended inside a stream frame, {self._frame_left} bytes short")
        if not self._buffer:
            return []
        line = bytes(self._buffer)
        self._buffer.clear()
        return self._line(line)

    def _line(self, line: bytes) -> list[ChannelUnit]:
        if not line.startswith(b"@"):
            return [ChannelLine(line)]
        if line == _ALIVE:
            return [ChannelAlive()]
        if line.startswith(_STREAM_PREFIX):
            digits = line[len(_STREAM_PREFIX):]
            if (0 < len(digits) <= _MAX_LENGTH_DIGITS and digits.isdigit()
                    and (digits == b"0" or not digits.startswith(b"0"))):
                self._frame_left = int(digits)
                return []
        raise ChannelFramingError(f"not a unit of one-channel stdout: {line!r}")
