"""The protocol 2 client (daemons/batch.py) on a real daemon with several sequences.

Each sequence is read by its own task; tokens are compared with a ``--parallel 1``
run of the same line where PROTOCOL.md 9.4 promises equality: a sequence that runs
alone on its lane. Concurrent ones are checked for completeness here (their numerics
are tests/native/test_batching.py's subject).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from daemons.batch import BatchClient, open_batch_client
from daemons.client import open_daemon
from daemons.errors import DaemonDiedError, DaemonReplyError
from daemons.process import open_daemon_process
from daemons.roles import DaemonLaunch
from protocol import Generate, InlineIds, Snapshot, Stats

Launcher = Callable[..., DaemonLaunch]

PROMPTS = [
    [9707, 11, 1879, 374], [40, 1079, 264, 3363, 315, 279], [785, 3974, 13876], [1, 2, 3, 4, 5],
]


def generate(prompt: list[int], n_gen: int, seq: int, **options: object) -> Generate:
    return Generate(InlineIds(tuple(prompt)), n_gen, ignore_eos=True, seq=seq, **options)  # type: ignore[arg-type]


async def test_concurrent_sequences_each_stream_to_their_own_task(launch: Launcher) -> None:
    async with open_daemon(launch("qwen35", "qwen3")) as solo:
        expected = []
        for prompt in PROMPTS:
            async with solo.generate(prompt, 12, ignore_eos=True) as stream:
                expected.append(await stream.collect())

    async with (open_daemon_process(launch("qwen35", "qwen3", parallel=4)) as daemon,
                open_batch_client(daemon) as client):
        assert client.parallel == 4 and client.free_seqs() == [0, 1, 2, 3]
        got: dict[int, list[int]] = {}

        async def run(seq: int) -> None:
            async with client.open_sequence(generate(PROMPTS[seq], 12, seq)) as stream:
                got[seq] = await stream.collect()
                assert stream.summary is not None and stream.summary.n_gen == 12

        async with trio.open_nursery() as nursery:
            for seq in range(4):
                nursery.start_soon(run, seq)
            # A command that runs beside them.
            stats = await client.run(Stats())
            assert stats.command == "stats"
        assert all(len(got[seq]) == 12 for seq in range(4))
        assert client.free_seqs() == [0, 1, 2, 3]

        # Alone on its lane, a sequence gives its solo tokens exactly (PROTOCOL.md 9.4).
        for seq in (3, 0):
            async with client.open_sequence(generate(PROMPTS[seq], 12, seq, reuse=False)) as alone:
                assert await alone.collect() == expected[seq]
        info = await client.run(Snapshot(5, seq=0))
        assert info.fields["n_tokens"] == str(len(PROMPTS[0]) + 11)


async def test_leaving_early_cancels_only_that_sequence(launch: Launcher) -> None:
    async with (open_daemon_process(launch("qwen35", "qwen3", parallel=2, n_ctx=1024)) as daemon,
                open_batch_client(daemon) as client):
        long = generate(PROMPTS[0], 400, 0)
        async with (client.open_sequence(long) as stream,
                    client.open_sequence(generate(PROMPTS[1], 20, 1)) as other):
            first = [await stream.__anext__() for _ in range(3)]
            assert len(first) == 3
            # Sequence 0 is busy: a second generation on it is refused.
            with pytest.raises(DaemonReplyError) as refused:
                async with client.open_sequence(generate(PROMPTS[2], 4, 0)):
                    pass
            assert refused.value.code == "seq_busy"
            assert len(await other.collect()) == 20
            # Leaving the block now cancels sequence 0 and waits for its end.
        assert stream.done and stream.summary is not None
        assert stream.summary.finish.value == "cancelled" and stream.summary.n_gen < 400
        assert not client.busy(0)
        async with client.open_sequence(generate(PROMPTS[2], 5, 0)) as again:
            assert len(await again.collect()) == 5


async def test_a_caller_cancelled_before_its_reply_leaves_the_sequence_stopped(
    launch: Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose client goes away after its generate line went out, before the
    reply came: the daemon runs it, so the client stops it; the sequence is free for the
    next request and later replies reach their own waiters (the soak test once saw
    ``seq_busy`` and a cancel's reply handed to a generate)."""
    async with (open_daemon_process(launch("qwen35", "qwen3", parallel=2, n_ctx=1024)) as daemon,
                open_batch_client(daemon) as client):
        send = daemon.send
        with trio.CancelScope() as scope:

            async def send_then_cancel(line: bytes) -> None:
                await send(line)
                scope.cancel()  # the caller goes away once its line is out

            monkeypatch.setattr(daemon, "send", send_then_cancel)
            async with client.open_sequence(generate(PROMPTS[0], 400, 0)):
                raise AssertionError("the block is entered only after the reply")
        monkeypatch.setattr(daemon, "send", send)
        assert scope.cancelled_caught and not client.busy(0)
        assert (await client.run(Stats())).command == "stats"
        async with client.open_sequence(generate(PROMPTS[2], 5, 0)) as again:
            assert len(await again.collect()) == 5


async def test_a_done_line_read_before_the_last_records_loses_no_token(
    launch: Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end record and the done line come on two fds: on a loaded machine the done
    line may be read first. Every token still reaches the stream, and the sequence is
    free only once both were read (CI once saw a request end with 315 of 316 tokens)."""
    async with (open_daemon_process(launch("qwen35", "qwen3", parallel=2, n_ctx=1024)) as daemon,
                open_batch_client(daemon) as client):
        receive_stream = daemon.receive_stream

        async def late_stream() -> bytes:
            data = await receive_stream()
            await trio.sleep(0.5)  # the stdout reader reads the done line meanwhile
            return data

        monkeypatch.setattr(daemon, "receive_stream", late_stream)
        for seq, n_gen in ((0, 1), (1, 6), (0, 3)):
            async with client.open_sequence(generate(PROMPTS[seq], n_gen, seq)) as stream:
                tokens = await stream.collect()
                assert stream.summary is not None and stream.summary.n_gen == n_gen
                assert len(tokens) == n_gen
            assert not client.busy(seq)


async def test_daemon_death_ends_every_stream(launch: Launcher) -> None:
    async with (open_daemon_process(launch("qwen35", "qwen3", parallel=2, n_ctx=1024)) as daemon,
                open_batch_client(daemon) as client,
                client.open_sequence(generate(PROMPTS[0], 400, 0)) as stream):
        await stream.__anext__()
        daemon.kill()
        with pytest.raises(DaemonDiedError):
            await stream.collect()


def test_batch_client_needs_protocol_2() -> None:
    with pytest.raises(ValueError, match="protocol 2"):
        BatchClient(type("D", (), {"ready": None})())
