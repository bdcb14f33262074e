"""The protocol 2 client (daemons/batch.py) on an in-memory ``--parallel`` daemon.

The fake writes protocol 2 as PROTOCOL.md 9.2 says (framed records on the stream, an
``ok generate seq=S`` at once, a done line after each end record), so the client's
routing, ends, cancels and failure paths are checked in milliseconds. Tokens under
concurrent decoding are tests/daemons/test_batch.py's subject, on a real daemon.
"""

from __future__ import annotations

import struct

import pytest
import trio

from daemons.batch import open_batch_client
from daemons.errors import DaemonDiedError, DaemonReplyError
from protocol import Generate, InlineIds, Restore, Stats, encode_seq_record
from tests.fake_daemon import Behaviour, FakeDaemons, default_logprobs, fake_launch, letters

PROMPTS = [[10, 11, 12], [20, 21], [30, 31, 32, 33], [40]]


@pytest.fixture
def fakes() -> FakeDaemons:
    return FakeDaemons()  # opened directly: no module's seam to patch


def generate(seq: int, n_gen: int, **options: object) -> Generate:
    return Generate(InlineIds(tuple(PROMPTS[seq])), n_gen, seq=seq, **options)  # type: ignore[arg-type]


def greedy(prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(letters([*prompt, *out]))
    return out


async def test_interleaved_sequences_each_get_their_own_tokens(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with (fakes.open_daemon_process(fake_launch(parallel=4)) as daemon,
                open_batch_client(daemon) as client):
        assert client.parallel == 4 and client.free_seqs() == [0, 1, 2, 3]
        got: dict[int, list[int]] = {}
        running: list[int] = []
        fake = fakes.latest()

        async def run(seq: int) -> None:
            async with client.open_sequence(generate(seq, 8 + seq)) as stream:
                assert client.busy(seq)
                first = await stream.__anext__()
                running.append(len(fake.runs))  # generations the daemon runs now
                got[seq] = [first, *await stream.collect()]
                assert stream.summary is not None and stream.summary.n_gen == 8 + seq

        async with trio.open_nursery() as nursery:
            for seq in range(4):
                nursery.start_soon(run, seq)
            assert (await client.run(Stats())).command == "stats"  # beside them (9.3)
        assert got == {seq: greedy(PROMPTS[seq], 8 + seq) for seq in range(4)}
        assert client.free_seqs() == [0, 1, 2, 3]
        assert max(running) == 4  # all at once, their records interleaved on one stream


async def test_logprob_records_and_prompt_records(fakes: FakeDaemons) -> None:
    async with (fakes.open_daemon_process(fake_launch(parallel=2)) as daemon,
                open_batch_client(daemon) as client):
        command = generate(1, 3, logprobs=2, prompt_logprobs=True)
        async with client.open_sequence(command, n_prompt=2) as stream:
            prompt_records = await stream.read_prompt_logprobs()
            tokens = []
            async for token in stream:
                assert stream.logprobs is not None and stream.logprobs.token == token
                tokens.append(token)
        assert prompt_records == [default_logprobs(PROMPTS[1][:1], PROMPTS[1][1], 2)]
        assert tokens == greedy(PROMPTS[1], 3)


async def test_a_done_line_read_before_the_last_records_loses_no_token(
    fakes: FakeDaemons, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end record and the done line come on two pipes: the done line may be read
    first. Every token still reaches the stream, and the sequence is free only once
    both were read."""
    async with (fakes.open_daemon_process(fake_launch(parallel=2)) as daemon,
                open_batch_client(daemon) as client):
        receive_stream = daemon.receive_stream

        async def late_stream() -> bytes:
            data = await receive_stream()
            await trio.sleep(0.01)  # the stdout reader reads the done line meanwhile
            return data

        monkeypatch.setattr(daemon, "receive_stream", late_stream)
        for seq, n_gen in ((0, 1), (1, 6), (0, 3)):
            with trio.fail_after(5):
                async with client.open_sequence(generate(seq, n_gen)) as stream:
                    tokens = await stream.collect()
            assert tokens == greedy(PROMPTS[seq], n_gen)
            assert stream.summary is not None and stream.summary.n_gen == n_gen
            assert not client.busy(seq)


async def test_leaving_early_cancels_only_that_sequence(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with (fakes.open_daemon_process(fake_launch(parallel=2)) as daemon,
                open_batch_client(daemon) as client):
        async with (client.open_sequence(generate(0, 400)) as long,
                    client.open_sequence(generate(1, 20)) as other):
            assert [await long.__anext__() for _ in range(3)] == greedy(PROMPTS[0], 3)
            with pytest.raises(DaemonReplyError) as busy:  # refused here, never sent
                async with client.open_sequence(generate(0, 4)):
                    pass
            assert busy.value.code == "seq_busy"
            assert len(await other.collect()) == 20
        assert long.done and long.summary is not None
        assert long.summary.finish.value == "cancelled" and long.summary.n_gen < 400
        fake = fakes.latest()
        assert fake.lines.count("cancel 0") == 1 and "cancel 1" not in fake.lines
        assert not client.busy(0)
        assert await client.cancel(0) is False  # nothing left to stop
        async with client.open_sequence(generate(0, 5)) as again:
            assert len(await again.collect()) == 5


async def test_a_refused_generation_frees_its_sequence(fakes: FakeDaemons) -> None:
    async with (fakes.open_daemon_process(fake_launch(parallel=2, n_ctx=64)) as daemon,
                open_batch_client(daemon) as client):
        with pytest.raises(DaemonReplyError) as refused:
            async with client.open_sequence(generate(1, 100)):
                pass
        assert refused.value.code == "context_overflow" and not client.busy(1)
        with pytest.raises(DaemonReplyError) as empty:
            async with client.open_sequence(Restore(5, InlineIds((1, 2)), 2, seq=1)):
                pass
        assert empty.value.code == "empty_slot" and not client.busy(1)
        async with client.open_sequence(generate(1, 2)) as stream:
            assert len(await stream.collect()) == 2


async def test_a_caller_cancelled_before_its_reply_leaves_the_sequence_stopped(
    fakes: FakeDaemons, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request whose client goes away after its generate line went out, before the
    reply came: the daemon runs it, so the client stops it; the sequence is free for the
    next request and later replies reach their own waiters."""
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with (fakes.open_daemon_process(fake_launch(parallel=2)) as daemon,
                open_batch_client(daemon) as client):
        send = daemon.send
        with trio.CancelScope() as scope:

            async def send_then_cancel(line: bytes) -> None:
                await send(line)
                scope.cancel()  # the caller goes away once its line is out

            monkeypatch.setattr(daemon, "send", send_then_cancel)
            async with client.open_sequence(generate(0, 400)):
                raise AssertionError("the block is entered only after the reply")
        monkeypatch.setattr(daemon, "send", send)
        assert scope.cancelled_caught and not client.busy(0)
        assert fakes.latest().lines[-1] == "cancel 0"
        # The same for a line the daemon refuses: its err reply ends the stream, so the
        # client neither waits for it nor kills a healthy daemon.
        with trio.CancelScope() as scope, trio.fail_after(5):
            monkeypatch.setattr(daemon, "send", send_then_cancel)
            async with client.open_sequence(generate(1, 10**6)):
                raise AssertionError("the block is entered only after the reply")
        monkeypatch.setattr(daemon, "send", send)
        assert scope.cancelled_caught and not client.busy(1) and daemon.returncode is None
        assert (await client.run(Stats())).command == "stats"
        async with client.open_sequence(generate(0, 5)) as again:
            assert len(await again.collect()) == 5


async def test_a_death_mid_batch_fails_every_stream_and_command(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with (fakes.open_daemon_process(fake_launch(parallel=3)) as daemon,
                open_batch_client(daemon) as client):
        failures: list[BaseException] = []

        async def run(seq: int) -> None:
            try:
                async with client.open_sequence(generate(seq, 400)) as stream:
                    await stream.collect()
            except DaemonDiedError as exc:
                failures.append(exc)

        with trio.fail_after(5):  # every stream ends: none waits on a dead daemon
            async with trio.open_nursery() as nursery:
                for seq in range(3):
                    nursery.start_soon(run, seq)
                await trio.sleep(0.01)
                fakes.latest().kill()
        assert len(failures) == 3
        assert all("killed by SIGKILL" in str(f) for f in failures)
        with pytest.raises(DaemonDiedError):
            await client.run(Stats())


async def test_a_protocol_violation_breaks_the_client_and_stops_the_daemon(
    fakes: FakeDaemons, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with (fakes.open_daemon_process(fake_launch(parallel=2)) as daemon,
                open_batch_client(daemon) as client):
        receive_stream = daemon.receive_stream
        poisoned = False

        async def garbled() -> bytes:
            nonlocal poisoned
            data = await receive_stream()
            if not poisoned:
                poisoned = True
                return encode_seq_record(0, [1]) + struct.pack("<2i", 99, 1)  # no seq 99
            return data

        monkeypatch.setattr(daemon, "receive_stream", garbled)
        with pytest.raises(DaemonReplyError) as broken:
            async with client.open_sequence(generate(0, 50)) as stream:
                await stream.collect()
        assert broken.value.code == "protocol"
        await daemon.exited.wait()
        assert daemon.returncode == -9


def test_the_client_needs_protocol_2(fakes: FakeDaemons) -> None:
    from daemons.batch import BatchClient

    with pytest.raises(ValueError, match="protocol 2"):
        BatchClient(type("D", (), {"ready": None})())
