"""Every line of the worked transcripts in PROTOCOL.md section 8, replayed on bytes alone.

The transcripts are copied here as test data; a test checks the copy still matches the
document, so an edit to either side is noticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import protocol
from protocol import (
    STREAM_END,
    Command,
    CommandError,
    ErrReply,
    Generate,
    GenerateSummary,
    OkReply,
    ReadyInfo,
    TokenStreamReader,
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

TRANSCRIPTS = {"session": SESSION, "cancel": CANCEL}


def test_the_copies_match_protocol_md() -> None:
    doc = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()
    section = doc[doc.index("\n## 8.") :]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.DOTALL)
    assert blocks == [SESSION, CANCEL]


@dataclass
class Pending:
    """A command line sent and not yet answered."""

    line: str
    command: Command | None = None
    refusal: CommandError | None = None
    stream: list[int] = field(default_factory=list)
    stream_done: bool = False

    @property
    def is_stream(self) -> bool:
        if self.command is not None:
            return self.command.is_stream
        # A refused line still gets its -1 if it named a stream command (section 1).
        return self.line.split(" ", 1)[0] in {"generate", "tokenize"}


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
            ids = [] if values == ["...", "-1"] else [int(v) for v in values[:-1]]
            assert values[-1] == str(STREAM_END)
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
        assert entry.command is not None
        assert isinstance(reply, OkReply)
        assert reply.command == entry.command.name
        if isinstance(entry.command, Generate):
            summary = GenerateSummary.from_reply(reply)
            if entry.stream:
                assert summary.n_gen == len(entry.stream)
        elif reply.command == "tokenize":
            assert reply.int_field("n") == len(entry.stream)


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


def test_cancel_details() -> None:
    (_, reply), (cancel, cancelled) = replay(CANCEL)
    assert isinstance(reply, OkReply)
    assert GenerateSummary.from_reply(reply).finish == "cancelled"
    assert cancelled == OkReply("cancel", {"running": "1"})
    assert cancel.command is not None and not cancel.command.is_stream
