"""Protocol 2 forms (PROTOCOL.md 9) on bytes alone: commands, records, done lines, ready."""

from __future__ import annotations

import random
import struct

import pytest

from protocol import (
    MAX_PARALLEL,
    PROTOCOL_VERSIONS,
    Cancel,
    CommandError,
    DoneLine,
    ErrorCode,
    ErrReply,
    FramedStreamReader,
    Generate,
    InlineIds,
    OkReply,
    Restore,
    SamplingParams,
    SeqEnd,
    SeqRecord,
    Snapshot,
    StreamFramingError,
    encode_seq_end,
    encode_seq_record,
    parse_command,
    parse_daemon_line,
    parse_done_line,
    parse_startup_line,
)
from protocol.errors import MalformedLineError

COMMANDS = [
    Generate(InlineIds((1, 2, 3)), 8, seq=0),
    Generate(InlineIds((1,)), 1, sampling=SamplingParams(temp=0.5, seed=3), logprobs=2, seq=63),
    Restore(4, InlineIds((9, 8)), 2, seq=5),
    Snapshot(1, seq=2),
    Snapshot(7),
    Cancel(3),
    Cancel(),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.encode().decode().strip())
def test_protocol_2_commands_round_trip(command: object) -> None:
    line = command.encode()  # type: ignore[attr-defined]
    assert parse_command(line) == command


def test_protocol_2_command_words() -> None:
    assert Generate(InlineIds((1, 2)), 4, seq=3).encode() == b"generate ids:1,2 4 seq=3\n"
    assert Restore(0, InlineIds((1,)), 1, seq=1).encode() == b"restore 0 ids:1 1 seq=1\n"
    assert Snapshot(2, seq=1).encode() == b"snapshot 2 seq=1\n"
    assert Cancel(5).encode() == b"cancel 5\n"
    assert Generate(InlineIds((1,)), 1, seq=0).framed
    assert not Generate(InlineIds((1,)), 1).framed


@pytest.mark.parametrize("seq", [-1, MAX_PARALLEL, 1.5, "1", True])
def test_a_sequence_outside_the_range_is_refused(seq: object) -> None:
    with pytest.raises(ValueError, match="seq"):
        Generate(InlineIds((1,)), 1, seq=seq)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"generate ids:1 1 seq=64", ErrorCode.BAD_SEQ),
        (b"generate ids:1 1 seq=x", ErrorCode.BAD_SEQ),
        (b"snapshot 1 seq=-1", ErrorCode.BAD_SEQ),
        (b"cancel 99", ErrorCode.BAD_SEQ),
        (b"cancel all", ErrorCode.BAD_ARGS),  # as protocol 1 answers it
        (b"cancel 1 2", ErrorCode.BAD_ARGS),
        (b"snapshot 1 seq=1 x=2", ErrorCode.BAD_ARGS),
    ],
)
def test_parse_command_refuses_protocol_2_lines_with_the_daemons_code(
    line: bytes, code: str
) -> None:
    with pytest.raises(CommandError) as refused:
        parse_command(line)
    assert refused.value.code == code


def test_framed_records_in_any_read_sizes() -> None:
    rng = random.Random(7)
    items: list[SeqRecord | SeqEnd] = []
    data = b""
    for _ in range(300):
        seq = rng.randrange(MAX_PARALLEL)
        if rng.random() < 0.2:
            items.append(SeqEnd(seq))
            data += encode_seq_end(seq)
        else:
            values = tuple(rng.randrange(-(2**31), 2**31) for _ in range(rng.choice([1, 1, 4, 42])))
            items.append(SeqRecord(seq, values))
            data += encode_seq_record(seq, values)
    reader = FramedStreamReader()
    got: list[SeqRecord | SeqEnd] = []
    at = 0
    while at < len(data):
        step = rng.randrange(1, 40)
        got += reader.feed(data[at:at + step])
        at += step
    assert got == items and reader.buffered == 0


def test_a_lone_terminator_between_records_is_skipped() -> None:
    # A line too long written as a stream command gets its protocol 1 -1 (9.3).
    reader = FramedStreamReader()
    data = encode_seq_record(1, (5,)) + struct.pack("<i", -1) + encode_seq_end(1)
    assert reader.feed(data) == [SeqRecord(1, (5,)), SeqEnd(1)]


@pytest.mark.parametrize("words", [(64, 1, 0), (-2, 1, 0), (0, -2), (3, -7)])
def test_broken_framing_raises(words: tuple[int, ...]) -> None:
    with pytest.raises(StreamFramingError):
        FramedStreamReader().feed(struct.pack(f"<{len(words)}i", *words))


def test_done_lines_round_trip_and_are_told_from_replies() -> None:
    ok = DoneLine(3, OkReply("generate", {"n_prompt": "3", "n_gen": "2", "finish": "length"}))
    assert ok.encode() == b"done 3 ok generate n_prompt=3 n_gen=2 finish=length\n"
    assert parse_done_line(ok.encode().rstrip(b"\n")) == ok
    err = DoneLine(0, ErrReply("decode_failed", "llama_decode failed (code 1)"))
    assert parse_daemon_line(err.encode().decode().rstrip("\n")) == err
    assert parse_daemon_line("ok generate seq=2") == OkReply("generate", {"seq": "2"})
    assert parse_daemon_line(b"err seq_busy sequence 2 is still generating") == ErrReply(
        "seq_busy", "sequence 2 is still generating")


@pytest.mark.parametrize("line", ["done", "done x ok stats", "done 64 ok stats", "done 1 hello",
                                  "dune 1 ok stats"])
def test_malformed_done_lines(line: str) -> None:
    with pytest.raises(MalformedLineError):
        parse_done_line(line)


READY = ("ready protocol=1 role=qwen35 arch=qwen3 vocab=151936 n_ctx=512 n_ctx_train=8192 "
         "bos=1 eos=2 add_bos=0 backend=cpu engine=e version=0.1.0 capabilities=generate,cancel")


def test_ready_line_versions_and_parallel() -> None:
    plain = parse_startup_line(READY)
    assert not isinstance(plain, ErrReply)
    assert plain.protocols == {1} and plain.parallel == 1
    batched = parse_startup_line(READY + " protocols=1,2 parallel=4")
    assert not isinstance(batched, ErrReply)
    assert batched.protocols == {1, 2} == PROTOCOL_VERSIONS and batched.parallel == 4
    assert parse_startup_line(batched.encode()) == batched
