"""The typed command API (daemons/client.py) and the generation stream (daemons/generation.py)
on an in-memory daemon.

Each method's line, its reply's reading, the choice of inline arguments or files, typed
errors, and what a death or an early exit does to a stream; what the engine computes
for them stays in tests/daemons/test_client.py, on real daemons.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trio

from daemons.client import open_daemon
from daemons.errors import DaemonDiedError, DaemonReplyError
from protocol import ModelState
from tests.fake_daemon import Behaviour, FakeDaemons, fake_launch, install, letters


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    return install(monkeypatch)


def greedy(prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(letters([*prompt, *out]))
    return out


async def test_long_prompts_and_texts_go_by_file(fakes: FakeDaemons) -> None:
    async with open_daemon(fake_launch()) as client:
        fake = fakes.latest()
        long_prompt = [i % 200 for i in range(600)]  # over the 512 ids sent inline
        async with client.generate(long_prompt, 3) as stream:
            assert await stream.collect() == greedy(long_prompt, 3)
        assert fake.lines[-1].startswith("generate /") and fake.decoded[-1].prompt == tuple(
            long_prompt)
        text = "x" * 3000  # over the 2048 characters sent inline
        assert await client.tokenize(text) == [ord("x")] * 3000
        assert fake.lines[-1].startswith("tokenize /")
        assert await client.detokenize(long_prompt[:5]) == bytes(long_prompt[:5]).decode()
        assert fake.lines[-1] == "detokenize ids:0,1,2,3,4"


async def test_slots_park_and_embeddings(fakes: FakeDaemons, tmp_path: Path) -> None:
    async with open_daemon(fake_launch(slots=4)) as client:
        async with client.generate([1, 2, 3, 4], 3, snap=(2, 0)) as stream:
            tokens = await stream.collect()
        assert stream.summary is not None and stream.summary.snap_slot == 0
        assert (await client.snapshot(1)).n_tokens == 4 + 3 - 1
        assert (await client.list_slots()).slots == {0: 2, 1: 6}
        async with client.restore(1, [1, 2, 3, 4, *tokens], 2) as stream:
            await stream.collect()
        assert stream.summary is not None and stream.summary.n_reused == 6
        assert await client.save_slot(1, tmp_path / "one.lsnap") > 0
        assert (await client.load_slot(3, tmp_path / "one.lsnap")).n_tokens == 6
        assert await client.free_snapshot(0) == 2 * 1024
        with pytest.raises(DaemonReplyError) as empty:
            await client.free_snapshot(0)
        assert empty.value.code == "empty_slot"
        with pytest.raises(DaemonReplyError) as bad:
            await client.snapshot(9)
        assert bad.value.code == "bad_slot" and bad.value.pid == client.pid
        parked = await client.park()
        assert parked.target is ModelState.PARKED and parked.draft is ModelState.ABSENT
        with pytest.raises(DaemonReplyError, match="parked"):
            async with client.generate([1], 1) as refused:
                await refused.collect()
        assert await client.tokenize("ok") == [111, 107]  # a parked daemon still tokenizes
        assert (await client.unpark()).target is ModelState.READY
        rows = await client.embed([[1, 2, 3], [4]], pooling="last")
        assert rows.shape == (2, 4) and rows.dtype == np.float32
        assert rows[0][0] == pytest.approx(3 / 1000) and rows[1][0] == pytest.approx(4 / 1000)
        # embed cleared the live sequence (5.11): what is reused now comes from slot 1.
        async with client.generate([1, 2, 3, 4, *tokens], 1) as stream:
            await stream.collect()
        assert stream.summary is not None and stream.summary.n_cached == 6  # from slot 1
        assert stream.summary.cache_slot == 1


async def test_compress_is_the_drafters(fakes: FakeDaemons) -> None:
    async with open_daemon(fake_launch("qwen35")) as target:
        with pytest.raises(DaemonReplyError) as unserved:
            await target.compress(list(range(100)), 500)
        assert unserved.value.code == "unsupported"
        assert "compress" not in fakes.latest().words  # refused here, never sent
    async with open_daemon(fake_launch("pflash")) as drafter:
        kept = await drafter.compress(list(range(100)), 500, chunk=10)
        assert kept == [*range(40), *range(90, 100)]  # in order, first and last chunks


async def test_death_mid_generation_raises_instead_of_hanging(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(token_delay_s=0.001))
    async with open_daemon(fake_launch()) as client:
        with trio.fail_after(5), pytest.raises(DaemonDiedError, match="SIGKILL") as died:
            async with client.generate([1, 2], 900) as stream:
                async for _ in stream:
                    fakes.latest().kill()
        assert died.value.returncode == -9 and client.exited.is_set()
        assert not client.intentional_exit
        with pytest.raises(DaemonDiedError):
            await client.tokenize("anyone there?")


async def test_leaving_a_generation_early_leaves_the_daemon_usable(fakes: FakeDaemons) -> None:
    async with open_daemon(fake_launch()) as client:
        async with client.generate([5, 6], 400, logprobs=3) as stream:
            async for _ in stream:
                break
        fake = fakes.latest()
        assert fake.words[-2:] == ["generate", "cancel"]
        assert fake.decoded[-1].finish == "cancelled"
        async with client.generate([5, 6], 4) as stream:
            assert await stream.collect() == greedy([5, 6], 4)


async def test_a_daemon_that_cannot_be_stopped_is_killed(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """A step longer than the drain allows (CANCEL_DRAIN_S): the daemon is of no use to
    the next request, so it is killed and the supervisor sees it."""
    fakes.plan(Behaviour(token_delay_s=60.0))
    async with open_daemon(fake_launch()) as client:
        async with client.generate([1], 10) as stream:
            await stream.__anext__()
        with trio.fail_after(100):
            await client.exited.wait()
        assert client.returncode == -9 and not client.intentional_exit
