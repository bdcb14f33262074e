"""``compress`` on the pflash role (PROTOCOL.md 5.7) through the client."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from daemons.client import DaemonClient, open_daemon
from daemons.errors import DaemonReplyError
from daemons.roles import DaemonLaunch
from protocol import Compress, CompressSummary, InlineIds

Launcher = Callable[..., DaemonLaunch]
CHUNK = 32


def _distinct_ids(daemon: DaemonClient, n: int, seed: int = 7) -> list[int]:
    """``n`` different ids, so that every kept id says which position it came from."""
    assert daemon.ready is not None
    return random.Random(seed).sample(range(1000, daemon.ready.n_vocab), n)


def _kept_chunks(ids: list[int], kept: list[int]) -> list[int]:
    """The chunks ``kept`` is made of, checking it is whole chunks of ``ids`` in order."""
    positions = [ids.index(token) for token in kept]
    assert positions == sorted(set(positions)), "kept ids are not an in-order subsequence"
    chunks = sorted({p // CHUNK for p in positions})
    whole = [p for c in chunks for p in range(c * CHUNK, min((c + 1) * CHUNK, len(ids)))]
    assert positions == whole, "kept ids are not whole chunks"
    return chunks


async def test_compress_keeps_whole_chunks_in_order_first_and_last_included(
    launch: Launcher,
) -> None:
    async with open_daemon(launch("pflash", "qwen3")) as daemon:
        ids = _distinct_ids(daemon, 8 * CHUNK)
        kept = await daemon.compress(ids, 500, chunk=CHUNK)
        chunks = _kept_chunks(ids, kept)
        assert chunks[0] == 0 and chunks[-1] == 7
        assert len(chunks) == 4  # half of 8 chunks
        assert len(_kept_chunks(ids, await daemon.compress(ids, 1, chunk=CHUNK))) == 2
        assert await daemon.compress(ids, 1000, chunk=CHUNK) == ids


async def test_compress_is_deterministic(launch: Launcher) -> None:
    async with open_daemon(launch("pflash", "qwen3")) as daemon:
        ids = _distinct_ids(daemon, 300)
        for options in ({}, {"lookahead": 4, "chunk": 16, "pool": 1}):
            first = await daemon.compress(ids, 300, **options)
            assert await daemon.compress(ids, 300, **options) == first
            assert 0 < len(first) < len(ids)
        assert len(_kept_chunks(ids, await daemon.compress(ids, 300, chunk=CHUNK))) > 2


async def test_compress_framing_matches_its_reply(launch: Launcher) -> None:
    async with open_daemon(launch("pflash", "qwen3")) as daemon:
        ids = _distinct_ids(daemon, 200)
        # The public method returns only the ids; the reply's counts are checked here
        # through the client's one stream-command path.
        command = Compress(InlineIds(tuple(ids)), 250, chunk=CHUNK)
        kept, reply = await daemon._stream_command(command)
        summary = CompressSummary.from_reply(reply)
        assert (summary.n_in, summary.n_out) == (200, len(kept))
        assert summary.ms >= 0
        assert await daemon.tokenize("still in step")  # nothing left on the stream


async def test_compress_errors(launch: Launcher) -> None:
    async with open_daemon(launch("pflash", "qwen3", n_ctx=512)) as daemon:
        assert daemon.ready is not None
        codes = []
        for ids in ([5, daemon.ready.n_vocab], _distinct_ids(daemon, daemon.ready.n_ctx + 1)):
            with pytest.raises(DaemonReplyError) as refused:
                await daemon.compress(ids, 100)
            codes.append(refused.value.code)
        await daemon.park()
        with pytest.raises(DaemonReplyError) as refused:
            await daemon.compress([5, 6, 7], 100)
        codes.append(refused.value.code)
        assert codes == ["bad_token", "context_overflow", "parked"]
        with pytest.raises(ValueError, match="keep_x1000"):
            await daemon.compress([5, 6], 0)
        with pytest.raises(ValueError, match="at least one prompt token"):
            await daemon.compress([], 100)


async def test_compress_is_unsupported_on_a_target(launch: Launcher) -> None:
    # The client refuses what the ready line does not list, as the daemon would.
    async with open_daemon(launch("qwen35", "qwen3")) as daemon:
        assert daemon.ready is not None and "compress" not in daemon.ready.capabilities
        with pytest.raises(DaemonReplyError) as refused:
            await daemon.compress([5, 6, 7], 100)
        assert refused.value.code == "unsupported"
        assert await daemon.tokenize("still in step")
