"""The in-memory daemon itself (tests/fake_daemon): it speaks PROTOCOL.md as a daemon does,
and it dies as a process does.

The middle layer's tests trust it in place of a native daemon, so here it is held to
the document: the worked transcripts of section 8 replayed line by line, the ready line
key for key in the order native/src/daemon/daemon.cpp writes it, protocol 2's records
and done lines (9.2), one channel's frames (10); and to a real death: what a client sees
of a fake SIGKILL is what tests/daemons/test_process.py sees of a real one.
"""

from __future__ import annotations

import ast
import functools
import re
import signal
from pathlib import Path

import pytest
import trio

import protocol
from daemons.batch import open_batch_client
from daemons.channel import CommandChannel
from daemons.client import open_daemon
from daemons.errors import DaemonDiedError, DaemonReplyError, DaemonStartError
from daemons.paths import repo_root
from protocol import (
    FramedStreamReader,
    Generate,
    InlineIds,
    InlineText,
    SeqEnd,
    Tokenize,
    TokenStreamReader,
    parse_daemon_line,
    parse_reply_line,
    write_token_file,
)
from tests.fake_daemon import (
    SEAM_MODULES,
    Behaviour,
    Death,
    FakeDaemons,
    FakeVocab,
    Refuse,
    Script,
    Startup,
    fake_launch,
    install,
)

DOC = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    return install(monkeypatch)


def test_the_seam_is_every_module_that_opens_a_daemon_process() -> None:
    """``install`` patches ``open_daemon_process`` where it is imported by name; a module
    that starts importing it would escape the fake, so it must be listed."""
    importers = set()
    for package in ("daemons", "orchestrator"):
        for path in (repo_root() / package).rglob("*.py"):
            text = path.read_text()
            if "open_daemon_process" not in text:
                continue
            tree = ast.parse(text)
            if any(isinstance(node, ast.ImportFrom) and node.module == "daemons.process"
                   and any(alias.name == "open_daemon_process" for alias in node.names)
                   for node in ast.walk(tree)):
                importers.add(".".join(path.relative_to(repo_root()).with_suffix("").parts))
    assert importers == set(SEAM_MODULES)


def _ready_keys(line: str) -> list[str]:
    return [word.split("=")[0] for word in line.split()[1:]]


async def test_the_ready_line_is_the_native_daemons_key_for_key(fakes: FakeDaemons) -> None:
    # PROTOCOL.md 9.8 was recorded from a real --parallel=2 daemon.
    recorded = re.search(r"^< (ready protocol=1 protocols=1,2 .*)$", DOC, re.M)
    assert recorded is not None
    async with open_daemon(fake_launch(parallel=2)) as client:
        assert client.ready is not None
        fake = fakes.latest()
        assert _ready_keys(fake.ready_line().decode()) == _ready_keys(recorded.group(1))
        assert client.ready.protocols == {1, 2} and client.ready.parallel == 2
        caps = re.search(r"capabilities=(\S+)", recorded.group(1))
        assert caps is not None and client.ready.fields["capabilities"] == caps.group(1)
    async with open_daemon(fake_launch(parked=True)) as tokenizer:
        assert tokenizer.ready is not None
        assert tokenizer.ready.fields["parked"] == "1" and "state_id" not in tokenizer.ready.fields
        assert "protocols" not in tokenizer.ready.fields  # one sequence: version 1's line
    async with open_daemon(fake_launch("pflash")) as drafter:
        assert drafter.ready is not None and "compress" in drafter.ready.capabilities


@functools.cache
def _real_size_vocab() -> FakeVocab:
    return FakeVocab(size=262144)  # the transcripts' ids are gemma3's


def _transcripts() -> list[str]:
    section = DOC[DOC.index("\n## 8.") : DOC.index("\n## 9.")]
    return re.findall(r"```\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.parametrize("transcript", _transcripts(), ids=lambda t: t.split("\n")[0][:40])
async def test_the_worked_transcripts_of_section_8(
    transcript: str, fakes: FakeDaemons, tmp_path: Path
) -> None:
    """Every command of section 8 gets the reply the document shows, by command word or
    error code and keys (values are the model's), and a stream exactly where it shows one."""
    fakes.defaults["model"] = Behaviour(vocab=_real_size_vocab())
    write_token_file(tmp_path / "prompt.bin", range(100, 117))
    write_token_file(tmp_path / "long_prompt.ids", [i % 250 for i in range(8192)])
    role = "pflash" if transcript.startswith("> compress /tmp") else "qwen35"
    async with fakes.open_daemon_process(fake_launch(role)) as daemon:
        streams = 0
        for raw in transcript.replace("/tmp/", f"{tmp_path}/").splitlines():
            kind, _, line = raw.partition(" ")
            if kind == ">":
                await daemon.send(line.encode() + b"\n")
            elif kind == "S:":
                reader = TokenStreamReader()
                while not reader.finished:
                    reader.feed(await daemon.receive_stream())
                streams += 1
            elif kind == "<" and not line.startswith("ready"):
                got = parse_reply_line(await daemon.receive_line())
                want = parse_reply_line(line)
                assert type(got) is type(want), (line, got)
                if isinstance(want, protocol.OkReply):
                    assert isinstance(got, protocol.OkReply)
                    assert got.command == want.command and set(want.fields) <= set(got.fields)
                else:
                    assert isinstance(got, protocol.ErrReply) and got.code == want.code, line
        assert streams == transcript.count("\nS:") + transcript.startswith("S:")
        # Nothing more came on the stream than the transcript shows (after a quit: EOF).
        with trio.move_on_after(0.01), pytest.raises(DaemonDiedError):
            extra = await daemon.receive_stream()
            pytest.fail(f"stream bytes the transcript does not show: {extra!r}")


async def test_a_kill_looks_like_a_real_death(fakes: FakeDaemons) -> None:
    """What tests/daemons/test_process.py asserts of a real SIGKILL."""
    async with fakes.open_daemon_process(fake_launch()) as daemon:
        fakes.latest().kill()
        await daemon.exited.wait()
        assert not daemon.intentional_exit and daemon.returncode == -signal.SIGKILL
        with pytest.raises(DaemonDiedError, match="daemon was killed by SIGKILL") as died:
            await daemon.receive_line()
        assert died.value.returncode == -signal.SIGKILL and died.value.pid == daemon.pid
        with pytest.raises(DaemonDiedError):
            await daemon.send(b"stats\n")
        with pytest.raises(DaemonDiedError):
            await daemon.receive_stream()


async def test_a_polite_quit_and_an_orderly_exit(fakes: FakeDaemons) -> None:
    async with open_daemon(fake_launch()) as client:
        assert await client.tokenize("hi") == [ord("h"), ord("i")]
    assert client.returncode == 0 and client.intentional_exit
    assert fakes.latest().lines[-1] == "quit"


async def test_sigterm_cancels_the_running_generation_and_exits_0(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.01))
    async with open_daemon(fake_launch()) as client:
        async with client.generate([1, 2, 3], 1000) as stream:
            await stream.__anext__()
            client._daemon.kill(signal.SIGTERM)
            rest = await stream.collect()
        assert stream.summary is not None and stream.summary.finish.value == "cancelled"
        assert len(rest) < 999
        await client.exited.wait()
        assert client.returncode == 0


@pytest.mark.parametrize(("startup", "message"), [
    (Startup.refuse("wrong_arch", "not a model of this role"),
     "refused to start: wrong_arch: not a model of this role"),
    (Startup.crash(), "daemon was killed by SIGKILL before its ready line"),
    (Startup.crash(3), "daemon exited with status 3 before its ready line"),
])
async def test_startup_failures_are_start_errors(
    startup: Startup, message: str, fakes: FakeDaemons
) -> None:
    fakes.plan(Behaviour(startup=startup))
    with pytest.raises(DaemonStartError, match=message) as failed:
        async with open_daemon(fake_launch()):
            pytest.fail("a daemon that failed to start came up")
    assert "fake: loading" in str(failed.value)  # its stderr tail is in the error
    if startup.kind == "refuse":
        assert fakes.latest().returncode == 3  # wrong_arch's exit status (PROTOCOL.md 2)


async def test_a_daemon_that_never_gets_ready_times_out(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock
) -> None:
    fakes.plan(Behaviour(startup=Startup("hang")))
    with pytest.raises(DaemonStartError, match="did not print its ready line within 600 s"):
        async with open_daemon(fake_launch()):
            pass
    assert fakes.latest().returncode == -signal.SIGTERM  # aclose escalated


async def test_deaths_at_chosen_points(fakes: FakeDaemons) -> None:
    fakes.plan(
        Behaviour(deaths=(Death("generate", nth=2, after_tokens=3, stderr="GGML_ASSERT"),)),
        Behaviour(deaths=(Death("stats", returncode=-signal.SIGSEGV),)),
        Behaviour(deaths=(Death("ready"),)),
    )
    async with open_daemon(fake_launch()) as client:
        async with client.generate([5, 6], 4) as stream:
            assert len(await stream.collect()) == 4  # the first generate runs
        got: list[int] = []
        with pytest.raises(DaemonDiedError, match=r"SIGKILL \(last stderr: .*GGML_ASSERT"):
            async with client.generate([5, 6], 10) as stream:
                async for token in stream:
                    got.append(token)
        assert len(got) == 3
    async with open_daemon(fake_launch()) as client:
        with pytest.raises(DaemonDiedError, match="SIGSEGV"):
            await client.stats()
    async with open_daemon(fake_launch()) as client:
        await client.exited.wait()
        with pytest.raises(DaemonDiedError):
            await client.stats()


async def test_refusals_are_scripted_per_command(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(refusals=(Refuse("tokenize", "bad_text_file", nth=2),)))
    async with open_daemon(fake_launch()) as client:
        channel = CommandChannel(client._daemon)
        assert (await channel.run_stream(Tokenize(InlineText("a"))))[0] == [97]
        with pytest.raises(DaemonReplyError, match="bad_text_file"):
            await channel.run_stream(Tokenize(InlineText("a")))
        # The refused stream command still ended its stream: the next one reads cleanly.
        assert (await channel.run_stream(Tokenize(InlineText("b"))))[0] == [98]


async def test_script_models_reply_and_end(fakes: FakeDaemons) -> None:
    vocab = FakeVocab()
    prompt, reply = vocab.ids("Q?"), vocab.ids("A!")
    fakes.plan(Behaviour(model=Script({tuple(prompt): reply})))
    async with open_daemon(fake_launch()) as client:
        async with client.generate(prompt, 10) as stream:
            assert await stream.collect() == reply
        assert stream.summary is not None and stream.summary.finish.value == "eog"
        async with client.generate(prompt, 10, stop=[ord("!")]) as stream:
            assert await stream.collect() == reply
        assert stream.summary is not None and stream.summary.finish.value == "stop"
        # A resumed context goes on where the reply stood.
        async with client.generate([*prompt, reply[0]], 10) as stream:
            assert await stream.collect() == reply[1:]


async def test_protocol_2_records_done_lines_and_cancel(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with fakes.open_daemon_process(fake_launch(parallel=2)) as daemon:
        await daemon.send(b"generate ids:1,2,3 3 seq=0\ngenerate ids:4,5 50 seq=1 logprobs=1\n")
        assert [await daemon.receive_line() for _ in range(2)] == [
            b"ok generate seq=0", b"ok generate seq=1"]
        await daemon.send(b"generate ids:1 4 seq=1\n")
        assert (await daemon.receive_line()).startswith(b"err seq_busy")
        await daemon.send(b"cancel 1\n")
        reader, records = FramedStreamReader(), {0: 0, 1: 0}
        ends: set[int] = set()
        while len(ends) < 2:
            for item in reader.feed(await daemon.receive_stream()):
                if isinstance(item, SeqEnd):
                    ends.add(item.seq)
                else:
                    records[item.seq] += 1
                    assert len(item.values) == (1 if item.seq == 0 else 4)
        lines = [await daemon.receive_line() for _ in range(3)]
        done = {p.seq: p.reply for p in map(parse_daemon_line, lines)
                if isinstance(p, protocol.DoneLine)}
        assert b"ok cancel seq=1 running=1" in lines
        assert done[0].fields["finish"] == "length" and records[0] == 3  # type: ignore[union-attr]
        assert done[1].fields["finish"] == "cancelled"  # type: ignore[union-attr]
        assert records[1] < 50


async def test_the_batch_client_over_a_fake(fakes: FakeDaemons) -> None:
    async with (fakes.open_daemon_process(fake_launch(parallel=3)) as daemon,
                open_batch_client(daemon) as batch):
        async with batch.open_sequence(Generate(InlineIds((7, 8)), 5, seq=2)) as stream:
            assert len(await stream.collect()) == 5
        assert stream.summary is not None and stream.summary.n_gen == 5
        assert fakes.latest().decoded[-1].seq == 2


async def test_one_channel_frames_the_stream_on_stdout(fakes: FakeDaemons) -> None:
    launch = fake_launch(channel="stdout", keepalive_ms=5)
    async with open_daemon(launch) as client:
        assert "--channel=stdout" in client.argv
        await trio.sleep(0.02)  # keep-alives interleave
        assert await client.tokenize("ok") == [ord("o"), ord("k")]
        async with client.generate([1, 2], 6) as stream:
            assert len(await stream.collect()) == 6
