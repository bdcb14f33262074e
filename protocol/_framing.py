"""Protocol 2 (PROTOCOL.md section 9): several sequences on one daemon.

With ``seq=S`` a ``generate`` or ``restore`` is answered at once (``ok generate seq=S``)
and runs beside the others. Its values come on the one stream fd as *records*, each
framed with the sequence it belongs to and its length, so that one reader serves every
sequence::

    seq  len  value_1 .. value_len        (int32 little-endian words)
    seq  -1                               (the sequence's output ends)

A record holds one written token: its id (``len=1``), or with ``logprobs=K`` its
logprobs record of ``2 + 2K`` words (section 5.1). The summary comes afterwards on
stdout as a ``done`` line: ``done <seq> `` followed by exactly the reply protocol 1
would have written (``ok generate n_prompt=..`` or ``err <code> <detail>``).

Everything here is sans I/O: ``FramedStreamReader`` turns bytes into records, and
``parse_daemon_line`` tells a reply from a ``done`` line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._codes import MAX_PARALLEL, RECORD_END
from ._replies import ErrReply, OkReply, parse_reply_line
from .errors import MalformedLineError, StreamFramingError

__all__ = [
    "DoneLine",
    "FramedStreamReader",
    "SeqEnd",
    "SeqRecord",
    "encode_seq_end",
    "encode_seq_record",
    "parse_daemon_line",
    "parse_done_line",
]

_WORD = struct.Struct("<i")


@dataclass(frozen=True, slots=True)
class SeqRecord:
    """One record of sequence ``seq``: a token id, or a logprobs record (5.1)."""

    seq: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SeqEnd:
    """Sequence ``seq`` wrote its last record; its ``done`` line follows on stdout."""

    seq: int


def encode_seq_record(seq: int, values: tuple[int, ...] | list[int]) -> bytes:
    """A record's bytes (for test doubles of a daemon)."""
    return struct.pack(f"<{2 + len(values)}i", seq, len(values), *values)


def encode_seq_end(seq: int) -> bytes:
    """The bytes of the record that ends ``seq``'s output."""
    return struct.pack("<2i", seq, RECORD_END)


class FramedStreamReader:
    """Turn protocol 2 stream bytes into records, whatever the fd's read sizes.

    Feed it what the fd returned; it returns the records and ends completed so far, in
    order. A ``-1`` where a record would start is skipped: it is the terminator of a
    refused protocol 1 stream command (a line too long, section 9.3), which belongs to
    no sequence.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held back because they do not yet make a whole record."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[SeqRecord | SeqEnd]:
        """Consume ``data``; the records (and ends) it completes.

        Raises:
            StreamFramingError: a sequence number outside ``0 .. MAX_PARALLEL - 1`` or a
                negative length other than the end marker.
        """
        self._buffer += data
        out: list[SeqRecord | SeqEnd] = []
        buf = self._buffer
        at = 0
        while len(buf) - at >= 4:
            (seq,) = _WORD.unpack_from(buf, at)
            if seq == -1:
                at += 4  # a protocol 1 terminator between records
                continue
            if not 0 <= seq < MAX_PARALLEL:
                raise StreamFramingError(f"record of sequence {seq}, outside 0..{MAX_PARALLEL - 1}")
            if len(buf) - at < 8:
                break
            (length,) = _WORD.unpack_from(buf, at + 4)
            if length == RECORD_END:
                out.append(SeqEnd(seq))
                at += 8
                continue
            if length < 0:
                raise StreamFramingError(f"record of sequence {seq} with length {length}")
            end = at + 8 + 4 * length
            if len(buf) < end:
                break
            out.append(SeqRecord(seq, struct.unpack_from(f"<{length}i", buf, at + 8)))
            at = end
        del buf[:at]
        return out


@dataclass(frozen=True, slots=True)
class DoneLine:
    """``done <seq> <reply>``: how sequence ``seq``'s generation ended (9.2)."""

    seq: int
    reply: OkReply | ErrReply

    def encode(self) -> bytes:
        """The line, ``\\n`` included (for test doubles of a daemon)."""
        return f"done {self.seq} ".encode() + self.reply.encode()


def parse_done_line(line: str | bytes) -> DoneLine:
    """Parse ``done <seq> ok ...`` or ``done <seq> err <code> <detail>``.

    Raises:
        MalformedLineError: not such a line.
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    head, _, rest = text.partition(" ")
    seq, _, reply = rest.partition(" ")
    if head != "done" or not seq.isdigit() or not 0 <= int(seq) < MAX_PARALLEL:
        raise MalformedLineError("expected 'done <seq> <reply>'", line=line)
    return DoneLine(int(seq), parse_reply_line(reply))


def parse_daemon_line(line: str | bytes) -> OkReply | ErrReply | DoneLine:
    """One stdout line of a daemon speaking protocol 2: a reply, or a ``done`` line.

    Raises:
        MalformedLineError: neither.
    """
    start = line[:5] if isinstance(line, str) else line[:5].decode("utf-8", "replace")
    if start == "done ":
        return parse_done_line(line)
    return parse_reply_line(line)
