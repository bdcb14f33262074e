"""The logprobs records of ``generate ... logprobs=K`` (PROTOCOL.md 5.1) and ``ok embed``."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    MAX_LOGPROBS,
    EmbedSummary,
    LogprobStreamReader,
    MalformedLineError,
    OkReply,
    StreamFramingError,
    TokenLogprobs,
    parse_reply_line,
)

END = struct.pack("<i", -1)


def test_records_then_the_terminator() -> None:
    first = TokenLogprobs(9561, -0.25, ((9561, -0.25), (7, -1.5)))
    second = TokenLogprobs(3, -2.0, ((4, -0.5), (3, -2.0)))
    reader = LogprobStreamReader(2)
    assert reader.feed(first.encode() + second.encode() + END) == [first, second]
    assert reader.finished and reader.count == 2


def test_a_float_that_reads_as_a_negative_int_is_not_a_terminator() -> None:
    # -0.0 is 0x80000000, and every negative log-probability has the sign bit set.
    record = TokenLogprobs(1, -0.0, ((1, -0.0),))
    assert struct.unpack_from("<i", record.encode(), 4)[0] < 0
    reader = LogprobStreamReader(1)
    assert reader.feed(record.encode()) == [record]
    assert not reader.finished


def test_k_zero_is_the_chosen_token_only() -> None:
    reader = LogprobStreamReader(0)
    assert reader.feed(struct.pack("<if", 5, -3.5) + END) == [TokenLogprobs(5, -3.5, ())]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack("<if", -7, -1.0), "negative value -7"),
        (struct.pack("<if", 1, 0.5), "is not <= 0"),
        (struct.pack("<if", 1, math.nan), "is not <= 0"),
        (struct.pack("<if", 1, -1.0) + END + b"\0", "after the -1"),
    ],
)
def test_framing_errors(data: bytes, match: str) -> None:
    with pytest.raises(StreamFramingError, match=match):
        LogprobStreamReader(0).feed(data)


def test_top_k_is_bounded() -> None:
    LogprobStreamReader(MAX_LOGPROBS)
    with pytest.raises(ValueError, match="top_k"):
        LogprobStreamReader(MAX_LOGPROBS + 1)


_logprob = st.floats(max_value=0.0, allow_nan=False, width=32)
_id = st.integers(0, 2**31 - 1)


@given(
    k=st.integers(0, MAX_LOGPROBS),
    data=st.data(),
    cuts=st.lists(st.integers(0, 10**6), max_size=8),
)
def test_any_split_of_any_records_reads_back(k: int, data: st.DataObject, cuts: list[int]) -> None:
    records = data.draw(st.lists(st.builds(
        TokenLogprobs, _id, _logprob, st.lists(st.tuples(_id, _logprob), min_size=k, max_size=k)
        .map(tuple)), max_size=6))
    wire = b"".join(r.encode() for r in records) + END
    reader = LogprobStreamReader(k)
    got: list[TokenLogprobs] = []
    start = 0
    for cut in sorted(c % (len(wire) + 1) for c in cuts):
        got += reader.feed(wire[start:cut])
        start = max(start, cut)
    got += reader.feed(wire[start:])
    assert got == records and reader.finished
    reader.reset()
    assert not reader.finished and reader.count == 0


def test_embed_summary() -> None:
    reply = parse_reply_line("ok embed n=2 dim=64 n_tokens=4 ms=15.7")
    assert isinstance(reply, OkReply)
    assert EmbedSummary.from_reply(reply) == EmbedSummary(2, 64, 4, 15.7)
    short = parse_reply_line("ok embed n=2 dim=64")
    assert isinstance(short, OkReply)
    with pytest.raises(MalformedLineError):
        EmbedSummary.from_reply(short)
