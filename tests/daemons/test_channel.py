"""One channel (PROTOCOL.md 10): replies and stream on stdout, through real daemons.

The same greedy tokens as on the stream fd, over protocol 1 and protocol 2; the link
watchdog turns a silent daemon into ``DaemonDiedError`` and a host that never answers
into ``HostUnreachableError``, each within its timeout.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable

import pytest
import trio

from daemons.batch import open_batch_client
from daemons.client import DaemonClient, open_daemon
from daemons.errors import DaemonDiedError, HostUnreachableError
from daemons.process import open_daemon_process
from daemons.roles import DaemonLaunch
from protocol import Generate, InlineIds

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]

PROMPTS = [[9707, 11, 1879, 374], [40, 1079, 264, 3363, 315, 279], [785, 3974, 13876]]


async def test_protocol_1_gives_the_stream_fd_tokens(launch: Launcher, greedy: Greedy) -> None:
    async def run(**flags: object) -> tuple[list[list[int]], list[int]]:
        client: DaemonClient
        async with open_daemon(launch("qwen35", "qwen3", **flags)) as client:
            tokens = [await greedy(client, prompt, 10) for prompt in PROMPTS]
            ids = await client.tokenize("one channel")
            table = await client.piece_table()
            assert client.ready is not None and len(table.pieces) == client.ready.n_vocab
            return tokens, ids

    assert await run(channel="stdout", keepalive_ms=50) == await run()


async def test_protocol_2_gives_the_stream_fd_tokens(launch: Launcher, greedy: Greedy) -> None:
    async with open_daemon(launch("qwen35", "qwen3")) as solo:
        expected = [await greedy(solo, prompt, 10) for prompt in PROMPTS]
    flags = {"parallel": 3, "channel": "stdout", "keepalive_ms": 20}
    async with (open_daemon_process(launch("qwen35", "qwen3", **flags)) as daemon,
                open_batch_client(daemon) as client):
        got: dict[int, list[int]] = {}

        async def run(seq: int) -> None:
            command = Generate(InlineIds(tuple(PROMPTS[seq])), 10, ignore_eos=True, seq=seq)
            async with client.open_sequence(command) as stream:
                got[seq] = await stream.collect()

        async with trio.open_nursery() as nursery:
            for seq in range(3):
                nursery.start_soon(run, seq)
        assert all(len(got[seq]) == 10 for seq in range(3))
        # Alone on its lane, each gives its solo tokens (PROTOCOL.md 9.4).
        for seq in range(3):
            command = Generate(InlineIds(tuple(PROMPTS[seq])), 10, ignore_eos=True, seq=seq,
                               reuse=False)
            async with client.open_sequence(command) as alone:
                assert await alone.collect() == expected[seq]


async def test_a_silent_link_ends_the_generation_within_its_timeout(launch: Launcher) -> None:
    flags = {"channel": "stdout", "keepalive_ms": 50, "link_timeout_s": 1.0, "n_ctx": 8192}
    async with (open_daemon(launch("qwen35", "qwen3", **flags)) as client,
                client.generate(PROMPTS[0], 8000, ignore_eos=True) as stream):
        await stream.__anext__()
        # A frozen host: no token, no keep-alive, the pipes stay open.
        os.kill(client.pid, signal.SIGSTOP)
        started = trio.current_time()
        with pytest.raises(DaemonDiedError, match="link lost: nothing heard"), trio.fail_after(10):
            async for _ in stream:
                pass
        assert trio.current_time() - started < 5


async def test_a_host_that_refuses_or_stays_silent_is_unreachable(launch: Launcher) -> None:
    # ssh's status for a failed connection, and a connection that never answers.
    for launcher, timeout in ((("sh", "-c", "exit 255", "ssh"), None),
                              (("sh", "-c", "sleep 60", "ssh"), 1.0)):
        spec = launch("qwen35", "qwen3", channel="stdout", launcher=launcher,
                      link_timeout_s=timeout, host="far")
        with trio.fail_after(10), pytest.raises(HostUnreachableError, match="'far' is unreachable"):
            async with open_daemon(spec):
                pass
