"""The stream fd's framing (PROTOCOL.md sections 1 and 7): int32 LE values, then one -1."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import StreamFramingError, TokenStreamReader, encode_token_bytes


def stream(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def test_whole_stream_in_one_chunk() -> None:
    reader = TokenStreamReader()
    assert reader.feed(stream(2, 9259, 1902, -1)) == [2, 9259, 1902]
    assert reader.finished
    assert reader.count == 3
    assert reader.buffered == 0


def test_only_the_terminator() -> None:
    reader = TokenStreamReader()
    assert not reader.finished
    assert reader.feed(stream(-1)) == []
    assert reader.finished
    assert reader.count == 0


def test_partial_values_are_buffered_across_feeds() -> None:
    data = stream(236764, 1017, -1)
    reader = TokenStreamReader()
    assert reader.feed(data[:3]) == []
    assert reader.buffered == 3
    assert reader.feed(data[3:6]) == [236764]
    assert reader.buffered == 2
    assert reader.feed(b"") == []
    assert reader.feed(data[6:11]) == [1017]
    assert not reader.finished
    assert reader.feed(data[11:]) == []
    assert reader.finished


def test_accepts_bytearray_and_memoryview() -> None:
    reader = TokenStreamReader()
    assert reader.feed(bytearray(stream(1))) == [1]
    assert reader.feed(memoryview(stream(2, -1))) == [2]
    assert reader.finished


def test_bytes_after_the_terminator_in_the_same_chunk() -> None:
    reader = TokenStreamReader()
    with pytest.raises(StreamFramingError, match="4 byte"):
        reader.feed(stream(1, -1, 5))
    reader.reset()
    with pytest.raises(StreamFramingError, match="1 byte"):
        reader.feed(stream(1, -1) + b"\x00")


def test_bytes_after_the_terminator_in_a_later_chunk() -> None:
    reader = TokenStreamReader()
    reader.feed(stream(-1))
    assert reader.feed(b"") == []
    with pytest.raises(StreamFramingError, match="after the -1"):
        reader.feed(b"\x01")


@pytest.mark.parametrize("value", [-2, -(2**31), -100])
def test_negative_values_other_than_the_terminator(value: int) -> None:
    reader = TokenStreamReader()
    with pytest.raises(StreamFramingError, match=f"negative value {value}"):
        reader.feed(stream(3, value, -1))


def test_reset_starts_the_next_command() -> None:
    reader = TokenStreamReader()
    reader.feed(stream(7, -1))
    reader.reset()
    assert not reader.finished and reader.count == 0
    assert reader.feed(stream(8)[:2]) == []
    reader.reset()
    assert reader.buffered == 0
    assert reader.feed(stream(9, -1)) == [9]
    assert "finished=True" in repr(reader)


_ids = st.lists(st.integers(0, 2**31 - 1), max_size=64)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[list[int], list[bytes]]:
    """Token ids and their stream (with -1) cut at arbitrary points, 1-byte chunks included."""
    ids = draw(_ids)
    data = encode_token_bytes([*ids, -1])
    if draw(st.booleans()):
        cuts = list(range(1, len(data)))  # every chunk one byte long
    else:
        cuts = sorted(draw(st.sets(st.integers(1, len(data) - 1), max_size=len(data))))
    bounds = [0, *cuts, len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    # A read may also come back empty-handed (e.g. a zero-length chunk in a test double).
    where = draw(st.integers(0, len(chunks) - 1))
    chunks.insert(where, b"")
    return ids, chunks


@given(chunked())
def test_same_ids_however_the_stream_is_chunked(case: tuple[list[int], list[bytes]]) -> None:
    ids, chunks = case
    reader = TokenStreamReader()
    seen: list[int] = []
    last_data_chunk = max(i for i, chunk in enumerate(chunks) if chunk)
    for index, chunk in enumerate(chunks):
        assert not reader.finished
        seen.extend(reader.feed(chunk))
        # Finished exactly when the last byte of the -1 has arrived, not before.
        assert reader.finished == (index >= last_data_chunk)
        if reader.finished:
            break
    assert seen == ids
    assert reader.count == len(ids)
    assert reader.buffered == 0


@given(_ids, st.binary(min_size=1, max_size=8))
def test_anything_after_the_terminator_is_an_error(ids: list[int], extra: bytes) -> None:
    reader = TokenStreamReader()
    with pytest.raises(StreamFramingError):
        reader.feed(encode_token_bytes([*ids, -1]) + extra)
