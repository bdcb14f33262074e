"""One channel (PROTOCOL.md 10) on bytes alone: frames, keep-alives, lines, any chunking."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from protocol import (
    ChannelAlive,
    ChannelFramingError,
    ChannelLine,
    ChannelReader,
    ChannelStream,
    ChannelUnit,
    FramedStreamReader,
    SeqEnd,
    SeqRecord,
    TokenStreamReader,
    encode_alive,
    encode_seq_end,
    encode_seq_record,
    encode_stream_frame,
)


def read_all(data: bytes, chunks: list[int] | None = None) -> list[ChannelUnit]:
    reader = ChannelReader()
    units: list[ChannelUnit] = []
    at = 0
    for size in chunks or [len(data)]:
        units.extend(reader.feed(data[at:at + size]))
        at += size
    units.extend(reader.feed(data[at:]))
    units.extend(reader.eof())
    return units


def merged(units: list[ChannelUnit]) -> list[ChannelUnit]:
    """Adjacent stream pieces joined: the reader may split a frame where bytes were split."""
    out: list[ChannelUnit] = []
    for unit in units:
        if isinstance(unit, ChannelStream) and out and isinstance(out[-1], ChannelStream):
            out[-1] = ChannelStream(out[-1].data + unit.data)
        else:
            out.append(unit)
    return out


def test_the_transcript_of_section_10() -> None:
    # The bytes of PROTOCOL.md 10's protocol 1 transcript: tokenize, then quit.
    data = (b"@alive\nready protocol=1 role=qwen35\n@stream 8\n\x02\x00\x00\x00_[\x00\x00"
            b"@stream 4\n\xff\xff\xff\xffok tokenize n=2\n@alive\nok quit\n")
    units = read_all(data)
    assert units == [ChannelAlive(), ChannelLine(b"ready protocol=1 role=qwen35"),
                     ChannelStream(b"\x02\x00\x00\x00_[\x00\x00"),
                     ChannelStream(b"\xff\xff\xff\xff"), ChannelLine(b"ok tokenize n=2"),
                     ChannelAlive(), ChannelLine(b"ok quit")]
    stream = b"".join(u.data for u in units if isinstance(u, ChannelStream))
    reader = TokenStreamReader()
    assert reader.feed(stream) == [2, 23391] and reader.finished


def test_frame_bytes_may_hold_newlines_and_at_signs() -> None:
    payload = b"\n@alive\n@stream 3\nok x\n"
    units = read_all(encode_stream_frame(payload) + b"ok generate n_gen=1\n")
    assert merged(units) == [ChannelStream(payload), ChannelLine(b"ok generate n_gen=1")]


def test_empty_frame_and_crlf_lines() -> None:
    assert read_all(b"@stream 0\nok vocab n=0\r\n") == [ChannelLine(b"ok vocab n=0")]


@pytest.mark.parametrize("line", [b"@streams 4", b"@stream", b"@stream -1", b"@stream 01",
                                  b"@stream 4x", b"@alive now", b"@", b"@stream 12345678901"])
def test_an_at_line_that_is_no_unit_is_refused(line: bytes) -> None:
    with pytest.raises(ChannelFramingError):
        read_all(line + b"\n")


def test_eof_inside_a_frame_is_refused() -> None:
    reader = ChannelReader()
    assert reader.feed(b"@stream 8\n\x01\x00") == [ChannelStream(b"\x01\x00")]
    assert not reader.at_boundary
    with pytest.raises(ChannelFramingError, match="6 bytes short"):
        reader.eof()


def test_an_endless_at_line_is_refused_before_its_newline() -> None:
    with pytest.raises(ChannelFramingError):
        ChannelReader().feed(b"@stream 1234567890123456")


def test_protocol_2_records_cross_the_channel_whole() -> None:
    stream = (encode_seq_record(0, [5]) + encode_seq_record(1, [7]) + encode_seq_end(0)
              + encode_seq_end(1))
    data = (encode_stream_frame(stream[:12]) + b"ok generate seq=1\n"
            + encode_stream_frame(stream[12:]) + b"done 0 ok generate n_gen=1\n")
    framed = FramedStreamReader()
    out: list[object] = []
    for unit in read_all(data, [3, 5, 1, 17]):
        if isinstance(unit, ChannelStream):
            out.extend(framed.feed(unit.data))
        else:
            out.append(unit)
    assert out == [SeqRecord(0, (5,)), ChannelLine(b"ok generate seq=1"), SeqRecord(1, (7,)),
                   SeqEnd(0), SeqEnd(1), ChannelLine(b"done 0 ok generate n_gen=1")]


def random_units(rng: random.Random) -> list[ChannelUnit]:
    units: list[ChannelUnit] = []
    for _ in range(rng.randrange(1, 40)):
        kind = rng.randrange(3)
        if kind == 0:
            units.append(ChannelAlive())
        elif kind == 1:
            word = rng.choice([b"ok", b"err", b"done", b"ready"])
            body = bytes(rng.choice(b"abc=@\t 0123456789") for _ in range(rng.randrange(20)))
            units.append(ChannelLine(word + b" " + body))
        else:
            units.append(ChannelStream(rng.randbytes(rng.randrange(1, 64))))
    return units


def encode(units: list[ChannelUnit]) -> bytes:
    out = b""
    for unit in units:
        if isinstance(unit, ChannelAlive):
            out += encode_alive()
        elif isinstance(unit, ChannelLine):
            out += unit.line + b"\n"
        else:
            out += encode_stream_frame(unit.data)
    return out


def test_fuzz_round_trip_under_any_chunking() -> None:
    rng = random.Random(18)
    for _ in range(500):
        units = random_units(rng)
        data = encode(units)
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), rng.randrange(8))))
        chunks = [b - a for a, b in itertools.pairwise([0, *cuts])]
        got = read_all(data, chunks)
        assert merged(got) == merged(units)


# The units of section 10 that start with '@': a frame header (at most 10 digits, no
# leading zero) and the keep-alive. Any other line starting with '@' is refused.
UNIT_HEADER = re.compile(rb"@stream (0|[1-9][0-9]{0,9})|@alive")


def test_fuzz_garbage_raises_only_channel_framing_error() -> None:
    rng = random.Random(1018)
    must_refuse = refused = 0
    for _ in range(500):
        data = rng.randbytes(rng.randrange(64))
        if rng.random() < 0.5:
            data = b"@stream " + data
        first, newline, _ = data.partition(b"\n")
        first = first.rstrip(b"\r") if newline else first
        # A first line starting with '@' that is no unit: refused, whatever follows (a
        # reader that took any '@' line as a protocol line passed this test before).
        refuse = first.startswith(b"@") and not UNIT_HEADER.fullmatch(first)
        must_refuse += refuse
        reader = ChannelReader()
        try:
            reader.feed(data)
            reader.eof()
        except ChannelFramingError:
            refused += refuse
        else:
            assert not refuse, data
    assert refused == must_refuse > 200  # about the half that starts with "@stream "
