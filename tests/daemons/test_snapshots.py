"""Snapshots and restore (PROTOCOL.md 5.5) through the client, on every generating role.

With ``--chunk=8`` and snapshots at multiples of 8, a restore must give exactly the tokens
of an uninterrupted generate: the contract's exactness rule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from daemons.client import DaemonClient, open_daemon
from daemons.errors import DaemonReplyError
from daemons.roles import DaemonLaunch
from protocol import SlotList

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]

CHUNK = 8
SLOTS = 4
TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps "
    "and listening to the sea, and wrote down the weather in a small book."
)


async def _prompt(daemon: DaemonClient, n: int) -> list[int]:
    ids = await daemon.tokenize(TEXT)
    assert len(ids) >= n
    return ids[:n]


async def test_restore_from_a_chunk_aligned_snap_is_exact(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy
) -> None:
    async with open_daemon(launch(*generating, chunk=CHUNK, slots=SLOTS)) as daemon:
        prompt = await _prompt(daemon, 21)
        async with daemon.generate(prompt, 6, ignore_eos=True, snap=(16, 0)) as stream:
            snapped = await stream.collect()
        assert stream.summary is not None
        assert (stream.summary.snap_slot, stream.summary.snap_pos) == (0, 16)
        assert stream.summary.n_reused is None
        assert (await daemon.list_slots()).slots == {0: 16}

        uninterrupted = await greedy(daemon, prompt, 6)
        async with daemon.restore(0, prompt, 6, ignore_eos=True) as stream:
            restored = await stream.collect()
        assert restored == uninterrupted == snapped
        summary = stream.summary
        assert summary is not None and summary.command == "restore"
        assert (summary.n_prompt, summary.n_reused, summary.n_gen) == (21, 16, 6)


async def test_restore_with_exactly_the_slots_tokens_continues_the_sequence(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy
) -> None:
    async with open_daemon(launch(*generating, chunk=CHUNK, slots=SLOTS)) as daemon:
        prompt = await _prompt(daemon, 16)
        full = await greedy(daemon, prompt, 7)
        assert await greedy(daemon, prompt, 5) == full[:5]
        # The live sequence holds the prompt and every generated token but the last.
        info = await daemon.snapshot(2)
        assert (info.slot, info.n_tokens) == (2, 16 + 4)
        assert info.host_bytes > 0
        async with daemon.restore(2, prompt + full[:4], 3, ignore_eos=True) as stream:
            continued = await stream.collect()
        assert continued == full[4:7]
        assert stream.summary is not None
        assert (stream.summary.n_reused, stream.summary.n_prompt) == (20, 20)


async def test_snapshot_errors_are_typed_and_leave_the_daemon_in_step(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy
) -> None:
    async with open_daemon(launch(*generating, slots=SLOTS)) as daemon:
        codes = []

        async def refused(call: Awaitable[object]) -> None:
            with pytest.raises(DaemonReplyError) as info:
                await call
            codes.append(info.value.code)

        await refused(daemon.snapshot(0))  # nothing decoded yet
        prompt = await _prompt(daemon, 12)
        await greedy(daemon, prompt, 1)
        await refused(greedy(daemon, prompt, 2, slot=1))
        await refused(daemon.free_snapshot(1))
        await refused(daemon.snapshot(SLOTS))
        await refused(greedy(daemon, prompt, 2, slot=SLOTS))
        await refused(daemon.free_snapshot(10**6))
        assert (await daemon.snapshot(0)).n_tokens == 12
        other = [prompt[0] + 1, *prompt[1:]]
        await refused(greedy(daemon, other, 2, slot=0))  # does not start with the slot's tokens
        await refused(greedy(daemon, prompt[:6], 2, slot=0))  # shorter than the slot
        assert codes == [
            "empty_sequence",
            "empty_slot",
            "empty_slot",
            "bad_slot",
            "bad_slot",
            "bad_slot",
            "snapshot_mismatch",
            "snapshot_mismatch",
        ]
        assert await greedy(daemon, prompt, 2, slot=0) == await greedy(daemon, prompt, 2)


async def test_list_and_free_slots(launch: Launcher, generating: tuple[str, str]) -> None:
    async with open_daemon(launch(*generating, chunk=CHUNK, slots=SLOTS)) as daemon:
        assert await daemon.list_slots() == SlotList({}, 0)
        prompt = await _prompt(daemon, 16)
        async with daemon.generate(prompt, 1, snap=(8, 3)) as stream:
            await stream.collect()
        first = await daemon.snapshot(0)
        again = await daemon.snapshot(0)  # replaces what slot 0 held
        assert first == again
        listed = await daemon.list_slots()
        assert listed.slots == {0: 16, 3: 8}
        assert listed.host_bytes > first.host_bytes
        assert await daemon.free_snapshot(0) == first.host_bytes
        after = await daemon.list_slots()
        assert after == SlotList({3: 8}, listed.host_bytes - first.host_bytes)
        await daemon.free_snapshot(3)
        assert await daemon.list_slots() == SlotList({}, 0)


async def test_leaving_a_restore_early_leaves_the_daemon_usable(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy
) -> None:
    async with open_daemon(launch(*generating, chunk=CHUNK, slots=SLOTS)) as daemon:
        prompt = await _prompt(daemon, 16)
        expected = await greedy(daemon, prompt, 3)
        await daemon.snapshot(1)  # the prompt and expected[:2]
        async with daemon.restore(1, prompt + expected[:2], 400, ignore_eos=True) as stream:
            async for _ in stream:
                break
        assert await greedy(daemon, prompt, 3) == expected
