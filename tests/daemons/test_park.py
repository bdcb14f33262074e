"""park and unpark (PROTOCOL.md 5.6) through the client, on every generating role."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from daemons.client import open_daemon
from daemons.errors import DaemonReplyError
from daemons.roles import DaemonLaunch
from protocol import ModelState

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]
TEXT = "A parked daemon keeps its tokenizer, its snapshots and its process."


async def test_park_then_unpark_generates_as_before(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy
) -> None:
    async with open_daemon(launch(*generating, chunk=8)) as daemon:
        prompt = (await daemon.tokenize(TEXT))[:8]
        before = await greedy(daemon, prompt, 6)
        await daemon.snapshot(0)
        no_draft = await daemon.park("draft")  # there is none: absent, and done
        assert (no_draft.target, no_draft.draft) == (ModelState.READY, ModelState.ABSENT)

        parked = await daemon.park("target")
        assert (parked.target, parked.draft) == (ModelState.PARKED, ModelState.ABSENT)
        again = await daemon.park()  # idempotent
        assert (again.target, again.draft) == (ModelState.PARKED, ModelState.ABSENT)
        assert (await daemon.stats())["parked"] == "1"

        refusals = []
        for call in (
            lambda: greedy(daemon, prompt, 2),
            lambda: daemon.snapshot(1),
            lambda: greedy(daemon, prompt, 2, slot=0),
        ):
            with pytest.raises(DaemonReplyError) as refused:
                await call()
            refusals.append(refused.value.code)
        assert refusals == ["parked"] * 3

        # What does not need the weights still works, and the slots survive.
        assert (await daemon.tokenize(TEXT))[:8] == prompt
        assert await daemon.detokenize(prompt)
        assert (await daemon.list_slots()).slots == {0: 8 + 5}

        unparked = await daemon.unpark()
        assert (unparked.target, unparked.draft) == (ModelState.READY, ModelState.ABSENT)
        assert (await daemon.unpark()).target is ModelState.READY
        assert (await daemon.stats())["parked"] == "0"
        assert await greedy(daemon, prompt, 6) == before
        assert await greedy(daemon, prompt + before[:5], 1, slot=0) == before[5:]


async def test_park_gives_back_the_model_memory(launch: Launcher, greedy: Greedy) -> None:
    """On the real default model (a 250 MB GGUF) the drop in resident memory is plain."""
    async with open_daemon(launch("qwen35", "default")) as daemon:
        prompt = await daemon.tokenize("Memory is")
        before = await greedy(daemon, prompt, 2)  # every weight has been touched
        ready_kb = int((await daemon.stats())["rss_kb"])
        parked = await daemon.park()
        assert parked.rss_kb < ready_kb - 100_000
        unparked = await daemon.unpark()
        assert await greedy(daemon, prompt, 2) == before
        assert unparked.rss_kb > parked.rss_kb
