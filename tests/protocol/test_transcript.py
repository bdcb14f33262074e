"""Every line of the worked transcripts in PROTOCOL.md section 8, replayed on bytes alone.

The transcripts are copied here as test data; a test checks the copy still matches the
document, so an edit to either side is noticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import pytest

import protocol
from protocol import (
    STREAM_END,
    Command,
    CommandError,
    Compress,
    CompressSummary,
    ErrorCode,
    ErrReply,
    FreeSnapshot,
    Generate,
    GenerateSummary,
    ListSlots,
    ModelState,
    OkReply,
    Park,
    ParkState,
    ReadyInfo,
    Restore,
    SlotList,
    Snapshot,
    SnapshotInfo,
    TokenFile,
    Tokenize,
    TokenStreamReader,
    Unpark,
    encode_token_bytes,
    parse_command,
    parse_reply_line,
    parse_startup_line,
)

READY = (
    "< ready protocol=1 role=qwen35 arch=gemma3 vocab=262144 n_ctx=4096 n_ctx_train=32768"
    " bos=2 eos=1 add_bos=1 backend=cpu engine=llama-cpp-python-0.3.36 version=0.1.0"
    " capabilities=generate,tokenize,detokenize,vocab,stats,quit\n"
)

SESSION = (
    READY
    + """\
> tokenize text:Hello%20world
S: 2 9259 1902 -1
< ok tokenize n=3
> generate ids:2,9259,1902 4
S: 236764 1017 1144 563 -1
< ok generate n_prompt=3 n_gen=4 finish=length prefill_ms=9.1 decode_ms=66.0
> generate /tmp/prompt.bin 64 temp=0.8 top_p=0.95 seed=7 stop=106
S: ... -1
< ok generate n_prompt=17 n_gen=23 finish=eog prefill_ms=30.2 decode_ms=410.7
> detokenize ids:9259,1902
< ok detokenize text=Hello%20world
> vocab /tmp/pieces.msgpack
< ok vocab n=262144 path=/tmp/pieces.msgpack
> generate ids: 4
S: -1
< err empty_prompt generate needs at least one prompt token
> frobnicate
< err unknown_command frobnicate is not a command; see capabilities in the ready line
> stats
< ok stats n_ctx=4096 n_vocab=262144 requests=2 tokens_prompt=20 tokens_generated=27 rss_kb=412332
> quit
< ok quit
"""
)

CANCEL = """\
> generate ids:2,9259,1902 512 temp=0.7
> cancel
S: 1017 1144 -1
< ok generate n_prompt=3 n_gen=2 finish=cancelled prefill_ms=9.0 decode_ms=31.5
< ok cancel running=1
"""

SNAPSHOTS = """\
> generate ids:2,9259,1902,563,1144,236764,1017,1144 3 snap=4:0
S: 623 901 17 -1
< ok generate n_prompt=8 n_gen=3 finish=length prefill_ms=5.2 decode_ms=40.1 snap_slot=0 snap_pos=4
> list_slots
< ok list_slots slots=0:4 bytes=131072
> restore 0 ids:2,9259,1902,563,1144,236764,1017,1144 3
S: 623 901 17 -1
< ok restore n_prompt=8 n_reused=4 n_gen=3 finish=length prefill_ms=2.9 decode_ms=40.3
> snapshot 1
< ok snapshot slot=1 n_tokens=10 bytes=262144
> restore 7 ids:2 1
S: -1
< err empty_slot slot 7 holds no snapshot
> free_snapshot 0
< ok free_snapshot slot=0 bytes=131072
"""

PARK = """\
> park
< ok park target=parked draft=absent rss_kb=60212
> generate ids:2,9259 4
S: -1
< err parked the target is parked; send unpark first
> tokenize text:still%20works
S: 2 50625 4059 -1
< ok tokenize n=3
> unpark
< ok unpark target=ready draft=absent rss_kb=412540
"""

COMPRESS = """\
> compress /tmp/long_prompt.ids 100 lookahead=8 chunk=32
S: 2 651 ... 1144 -1
< ok compress n_in=8192 n_out=832 ms=912.4
"""

BAD_INPUT = """\
> generate ids:1,2 notanumber
S: -1
< err bad_args n_gen must be an integer >= 1
> restore 99 ids:1 1
S: -1
< err bad_slot slot 99 is outside 0..63
> compress ids:1,2 50
S: -1
< err unsupported compress is served by the pflash role
"""

TRANSCRIPTS = {
    "session": SESSION,
    "cancel": CANCEL,
    "snapshots": SNAPSHOTS,
    "park": PARK,
    "compress": COMPRESS,
    "bad_input": BAD_INPUT,
}

STREAM_COMMANDS = {cls.name for cls in get_args(Command) if cls.is_stream}

# Refusals that depend on the daemon (its --slots, its role, its state), not on the line:
# the line parses, and only the daemon can answer these.
DAEMON_REFUSALS = {
    ErrorCode.BAD_SLOT,
    ErrorCode.EMPTY_SLOT,
    ErrorCode.EMPTY_SEQUENCE,
    ErrorCode.SNAPSHOT_MISMATCH,
    ErrorCode.PARKED,
    ErrorCode.UNSUPPORTED,
}


def test_the_copies_match_protocol_md() -> None:
    doc = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()
    section = doc[doc.index("\n## 8.") : doc.index("\n## 10.")]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.DOTALL)
    assert blocks == list(TRANSCRIPTS.values())


def test_stream_commands_are_those_marked_s_in_section_5() -> None:
    doc = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()
    marked = re.findall(r"^\| `([a-z_]+)[^`]*` [^|]*\| S \|", doc, flags=re.MULTILINE)
    assert set(marked) == STREAM_COMMANDS == {"generate", "tokenize", "restore", "compress"}


@dataclass
class Pending:
    """A command line sent and not yet answered."""

    line: str
    command: Command | None = None
    refusal: CommandError | None = None
    stream: list[int] = field(default_factory=list)
    stream_done: bool = False
    elided: bool = False  # the transcript shows "..." for some of the values

    @property
    def is_stream(self) -> bool:
        if self.command is not None:
            return self.command.is_stream
        # A refused line still gets its -1 if it named a stream command (section 1).
        return self.line.split(" ", 1)[0] in STREAM_COMMANDS


def replay(transcript: str) -> list[tuple[Pending, OkReply | ErrReply]]:
    """Check the client discipline of section 7 over a transcript; return the exchanges."""
    reader = TokenStreamReader()
    pending: list[Pending] = []
    answered: list[tuple[Pending, OkReply | ErrReply]] = []
    for raw in transcript.splitlines():
        kind, _, line = raw.partition(" ")
        if kind == "<" and line.startswith("ready"):
            assert not answered and not pending
            assert isinstance(parse_startup_line(line), ReadyInfo)
        elif kind == ">":
            entry = Pending(line)
            try:
                entry.command = parse_command(line + "\n")
            except CommandError as exc:
                entry.refusal = exc
            else:
                # The canonical encoding is exactly what the transcript shows.
                assert entry.command.encode() == (line + "\n").encode()
            pending.append(entry)
        elif kind == "S:":
            owner = next(p for p in pending if p.is_stream and not p.stream_done)
            values = line.split()
            assert values[-1] == str(STREAM_END)
            owner.elided = "..." in values
            ids = [int(v) for v in values[:-1] if v != "..."]
            reader.reset()
            data = encode_token_bytes([*ids, STREAM_END])
            for i in range(len(data)):  # one byte at a time, as a pipe may deliver it
                owner.stream.extend(reader.feed(data[i : i + 1]))
            assert reader.finished and owner.stream == ids
            owner.stream_done = True
        elif kind == "<":
            entry = pending.pop(0)  # replies come in command order
            assert entry.stream_done == entry.is_stream  # stream first, then the reply
            reply = parse_reply_line(line + "\n")
            answered.append((entry, reply))
        else:
            pytest.fail(f"unexpected transcript line {raw!r}")
    assert not pending
    return answered


@pytest.mark.parametrize("name", list(TRANSCRIPTS))
def test_every_line_parses_and_replies_match_commands(name: str) -> None:
    for entry, reply in replay(TRANSCRIPTS[name]):
        if entry.refusal is not None:
            # The reference parser refuses with the very code the daemon answered.
            assert isinstance(reply, ErrReply)
            assert reply.error_code is entry.refusal.code
            assert reply.detail == str(entry.refusal)
            continue
        command = entry.command
        assert command is not None
        if isinstance(reply, ErrReply):
            assert reply.error_code in DAEMON_REFUSALS
            assert not entry.stream
            continue
        assert reply.command == command.name
        n_streamed = None if entry.elided else len(entry.stream)
        if isinstance(command, Generate | Restore):
            summary = GenerateSummary.from_reply(reply)
            assert summary.command == command.name
            assert n_streamed in (None, summary.n_gen)
            assert (summary.snap_pos, summary.snap_slot) == (command.snap or (None, None))
        elif isinstance(command, Tokenize):
            assert n_streamed in (None, reply.int_field("n"))
        elif isinstance(command, Compress):
            assert n_streamed in (None, CompressSummary.from_reply(reply).n_out)
        elif isinstance(command, Snapshot):
            assert SnapshotInfo.from_reply(reply).slot == command.slot
        elif isinstance(command, FreeSnapshot):
            assert reply.int_field("slot") == command.slot
            reply.int_field("bytes")
        elif isinstance(command, ListSlots):
            SlotList.from_reply(reply)
        elif isinstance(command, Park | Unpark):
            ParkState.from_reply(reply)


def test_session_details() -> None:
    exchanges = replay(SESSION)
    replies = {e.line.split()[0] + str(i): r for i, (e, r) in enumerate(exchanges)}
    detok = replies["detokenize3"]
    assert isinstance(detok, OkReply) and detok.fields["text"] == "Hello world"
    stats = replies["stats7"]
    assert isinstance(stats, OkReply)
    for key in ("n_ctx", "n_vocab", "requests", "tokens_prompt", "tokens_generated", "rss_kb"):
        stats.int_field(key)  # section 5.3's minimum set, all integers
    assert replies["quit8"] == OkReply("quit", {})


def test_snapshot_details() -> None:
    (gen, generated), (_, listed), (restore, restored), (_, snapped), _, (_, freed) = replay(
        SNAPSHOTS
    )
    assert isinstance(gen.command, Generate) and isinstance(generated, OkReply)
    first = GenerateSummary.from_reply(generated)
    assert first.snap_pos is not None and first.snap_pos % 4 == 0  # chunk-aligned (--chunk=4)
    assert isinstance(listed, OkReply)
    assert SlotList.from_reply(listed) == SlotList({0: first.snap_pos}, 131072)
    assert isinstance(restored, OkReply)
    again = GenerateSummary.from_reply(restored)
    # An exact restore: the same tokens as the uninterrupted run, the slot's prefix reused.
    assert restore.stream == gen.stream
    assert (again.n_prompt, again.n_reused) == (first.n_prompt, first.snap_pos)
    # The live sequence holds the prompt and every generated token but the last.
    assert isinstance(snapped, OkReply)
    assert SnapshotInfo.from_reply(snapped).n_tokens == again.n_prompt + again.n_gen - 1
    assert isinstance(freed, OkReply) and freed.int_field("bytes") == 131072


def test_park_details() -> None:
    (_, parked), (_, refused), (_, tokenized), (_, unparked) = replay(PARK)
    assert isinstance(parked, OkReply) and isinstance(unparked, OkReply)
    assert ParkState.from_reply(parked).target is ModelState.PARKED
    assert refused == ErrReply("parked", "the target is parked; send unpark first")
    assert isinstance(tokenized, OkReply)
    assert ParkState.from_reply(unparked) == ParkState(ModelState.READY, ModelState.ABSENT, 412540)


def test_compress_details() -> None:
    ((entry, reply),) = replay(COMPRESS)
    assert entry.command == Compress(TokenFile("/tmp/long_prompt.ids"), 100, lookahead=8, chunk=32)
    assert isinstance(reply, OkReply)
    summary = CompressSummary.from_reply(reply)
    assert summary.n_out < summary.n_in
    assert entry.stream[0] == 2 and entry.elided


def test_cancel_details() -> None:
    (_, reply), (cancel, cancelled) = replay(CANCEL)
    assert isinstance(reply, OkReply)
    assert GenerateSummary.from_reply(reply).finish == "cancelled"
    assert cancelled == OkReply("cancel", {"running": "1"})
    assert cancel.command is not None and not cancel.command.is_stream
