"""The prefix cache (orchestrator/prefix_cache*.py) as the daemon sees it, on in-memory daemons.

Every request runs through the real generation core, so the cache's five steps
(``sequence``, ``prepare``, the generation, ``after_generate``, ``keep_sequence``,
``settle``) are called in the core's order, and the test reads that order as the exact
command lines the fake daemon received. The fake keeps its sequences and slots as an
attention-only engine does, so what a hit saves shows as ``Decoded.reused``: the prompt
tokens the daemon did not prefill. What only a real engine shows (the same tokens
with and without the cache) stays in tests/orchestrator/test_prefix_cache.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path

import pytest
import trio

from daemons.client import DaemonClient
from orchestrator.events import Finished, GenerationRequest, TextDelta
from orchestrator.generation import generate_events
from orchestrator.models import ServedModel
from orchestrator.prefix_cache import CacheSettings, PrefixCache
from tests.fake_daemon import (
    Behaviour,
    FakeDaemon,
    FakeDaemons,
    Refuse,
    install,
    letters,
    served_model,
    serving,
)

SYSTEM = 40  # tokens of each conversation's system part: its first mark
PER_TOKEN = 1024  # host bytes a fake slot takes per token (Behaviour.bytes_per_token)
N_GEN = 4


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    return install(monkeypatch)


def system(n: int) -> list[int]:
    """A system part of exactly ``SYSTEM`` tokens, its own for each ``n``."""
    return list(f"System prompt {n:03d}: be brief, be right.".ljust(SYSTEM).encode())


def user(text: str) -> list[int]:
    """A user turn; turns that start with different letters share nothing."""
    return list(f"{text}\n".encode())


async def restart(model: ServedModel, fakes: FakeDaemons) -> FakeDaemon:
    """SIGKILL the model's daemon; the restarted one, once the supervisor has it."""
    dying = model.supervisor.client
    assert dying is not None
    fakes.latest().kill()
    await dying.exited.wait()
    await model.supervisor.wait_ready()
    return fakes.latest()


async def ask(model: ServedModel, prompt: Sequence[int], *, leave_after: int | None = None,
              marks: tuple[int, ...] = (SYSTEM,)) -> list[int]:
    """One request through the generation core; the tokens it produced."""
    request = GenerationRequest(list(prompt), max_tokens=N_GEN, marks=marks)
    tokens: list[int] = []
    async with aclosing(generate_events(model, request)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                tokens += list(event.text.encode())
                if leave_after is not None and len(tokens) >= leave_after:
                    break
            if isinstance(event, Finished):
                assert event.completion_tokens == N_GEN
    return tokens


def reply(prompt: Sequence[int]) -> list[int]:
    out: list[int] = []
    for _ in range(N_GEN):
        out.append(letters([*prompt, *out]))
    return out


def commands(fake: FakeDaemon, since: int) -> list[str]:
    """The lines read since line ``since``, ids shortened to their count."""
    out = []
    for line in fake.lines[since:]:
        words = []
        for word in line.split(" "):
            if word.startswith("ids:"):
                word = f"ids:<{word.count(',') + 1}>"
            elif word.startswith("/"):
                word = "<path>"
            words.append(word)
        out.append(" ".join(words))
    return out


def cache_of(model: ServedModel) -> PrefixCache:
    assert model.prefix_cache is not None
    return model.prefix_cache


def assert_consistent(cache: PrefixCache, fake: FakeDaemon) -> None:
    """What the cache indexes is exactly what the daemon's slots hold."""
    held = {n: len(s.tokens) for n, s in fake.held.slots.items()}
    assert {e.slot: e.n_tokens for e in cache._entries.values()} == held
    assert not any(e.pending for e in cache._entries.values())
    assert cache.stats.ram_bytes == sum(s.host_bytes for s in fake.held.slots.values())


# --- the order, on a one-sequence daemon ---------------------------------------------------

async def test_each_step_sends_what_it_must_in_order(fakes: FakeDaemons) -> None:
    """Conversation A, its next turn, conversation B on the same system prompt, then A
    again: the exact lines, and what each generation reused."""
    cache = CacheSettings(ram_bytes=1 << 30)
    async with serving(served_model(cache=cache, slots=8)) as model:
        fake = fakes.latest()
        start = len(fake.lines)
        a1 = [*system(1), *user("hi")]
        a1_reply = await ask(model, a1)
        assert commands(fake, start) == [
            f"generate ids:<{len(a1)}> {N_GEN} snap={SYSTEM}:0 marks={SYSTEM}",  # prepare
            "list_slots",  # settle: the size of the new slot
        ]
        assert fake.decoded[-1].reused == 0

        start = len(fake.lines)
        a2 = [*a1, *a1_reply, *user("more")]
        a2_reply = await ask(model, a2)
        # The same conversation: the daemon's live sequence serves it, no slot command.
        assert commands(fake, start) == [f"generate ids:<{len(a2)}> {N_GEN} marks={SYSTEM}"]
        assert fake.decoded[-1].reused == len(a1) + N_GEN - 1

        start = len(fake.lines)
        b1 = [*system(1), *user("other")]
        await ask(model, b1)
        # Another conversation: the one held is kept in a slot first.
        assert commands(fake, start) == [
            "snapshot 1", f"generate ids:<{len(b1)}> {N_GEN} marks={SYSTEM}"]
        assert fake.held.slots[1].tokens == (*a2, *a2_reply[:-1])
        assert fake.decoded[-1].reused == SYSTEM

        start = len(fake.lines)
        a3 = [*a2, *a2_reply, *user("back")]
        await ask(model, a3)
        assert commands(fake, start) == [
            "snapshot 2", f"generate ids:<{len(a3)}> {N_GEN} marks={SYSTEM}"]
        # A hit: the daemon took A's history from slot 1 instead of prefilling it.
        back = fake.decoded[-1]
        assert back.cache_slot == 1 and back.reused == len(a2) + N_GEN - 1
        assert back.prefilled == len(a3) - back.reused
        stats = cache_of(model).stats
        assert (stats.hits, stats.misses) == (3, 1)
        assert stats.tokens_reused == sum(d.reused for d in fake.decoded)
        assert_consistent(cache_of(model), fake)


async def test_with_one_kv_stream_per_sequence_the_cache_restores_and_keeps(
    fakes: FakeDaemons,
) -> None:
    """A ``--kv-unified=off`` daemon (deterministic, several sequences) shares nothing in
    its pool: every step has its command. ``sequence`` picks the lane (``seq=0``),
    ``prepare`` the slot to restore, the generation is a ``restore``, ``keep_sequence``
    snapshots the lane, ``settle`` sizes new slots."""
    cache = CacheSettings(ram_bytes=1 << 30)
    model = served_model(cache=cache, slots=8, parallel=2, deterministic=True)
    async with serving(model):
        fake = fakes.latest()
        assert "--kv-unified=off" in fake.argv
        start = len(fake.lines)
        a1 = [*system(2), *user("hi")]
        a1_reply = await ask(model, a1)
        assert commands(fake, start) == [
            f"generate ids:<{len(a1)}> {N_GEN} snap={SYSTEM}:0 seq=0 reuse=0 marks={SYSTEM}",
            "snapshot 1 seq=0",  # keep_sequence
            "list_slots",  # settle
        ]
        start = len(fake.lines)
        a2 = [*a1, *a1_reply, *user("more")]
        await ask(model, a2)
        assert commands(fake, start) == [
            f"restore 1 ids:<{len(a2)}> {N_GEN} seq=0",  # prepare chose slot 1
            "snapshot 2 seq=0",
        ]
        restored = fake.decoded[-1]
        assert restored.command == "restore" and restored.reused == len(a1) + N_GEN - 1
        assert_consistent(cache_of(model), fake)


async def test_no_snap_where_the_daemon_already_holds_more(fakes: FakeDaemons) -> None:
    """A ``snap=`` caps what the daemon reuses at its position: a turn whose sequence
    holds more than the system part asks for none, and reuses all it holds."""
    async with serving(served_model(cache=CacheSettings(ram_bytes=1 << 30))) as model:
        fake = fakes.latest()
        first = [*system(3), *user("hi")]
        then = [*first, *await ask(model, first, marks=()), *user("more")]
        start = len(fake.lines)
        await ask(model, then)
        assert commands(fake, start) == [f"generate ids:<{len(then)}> {N_GEN} marks={SYSTEM}"]
        assert fake.decoded[-1].reused == len(first) + N_GEN - 1


# --- eviction -----------------------------------------------------------------------------

async def test_eviction_keeps_the_budget_in_lru_order(fakes: FakeDaemons) -> None:
    # Room for two system prompts' slots and a bit: each new conversation snaps its
    # system part, and saves the conversation it replaces.
    budget = 2 * SYSTEM * PER_TOKEN + SYSTEM * PER_TOKEN // 2
    async with serving(served_model(cache=CacheSettings(ram_bytes=budget), slots=8)) as model:
        fake, cache = fakes.latest(), cache_of(model)
        for n in range(1, 5):
            await ask(model, [*system(n), *user("go")])
            assert cache.stats.ram_bytes <= budget
            assert_consistent(cache, fake)
        assert cache.stats.evictions_ram >= 2
        assert fake.words.count("free_snapshot") == cache.stats.evictions_ram
        # Least recently used first: the newest system prompt is held, the oldest are not.
        held = {s.tokens for s in fake.held.slots.values()}
        assert tuple(system(4)) in held
        assert not held & {tuple(system(1)), tuple(system(2))}
        # The survivor is reused by a new conversation on system prompt 4.
        await ask(model, [*system(4), *user("again")])
        assert fake.decoded[-1].reused >= SYSTEM


async def test_a_budget_of_zero_turns_the_cache_off(fakes: FakeDaemons) -> None:
    async with serving(served_model(cache=CacheSettings(ram_bytes=0))) as model:
        fake = fakes.latest()
        start = len(fake.lines)
        await ask(model, [*system(5), *user("hi")])
        await ask(model, [*system(6), *user("hi")])
        assert commands(fake, start) == [
            f"generate ids:<{SYSTEM + 3}> {N_GEN} reuse=0 marks={SYSTEM}"] * 2


# --- refusals never fail a request -------------------------------------------------------------

async def test_a_refused_snapshot_is_skipped(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(refusals=(Refuse("snapshot", "empty_sequence"),))
    async with serving(served_model(cache=CacheSettings(ram_bytes=1 << 30))) as model:
        fake = fakes.latest()
        a1 = [*system(7), *user("hi")]
        await ask(model, a1)
        tokens = await ask(model, [*system(8), *user("hi")])  # saving A is refused
        assert tokens == reply([*system(8), *user("hi")])
        assert "snapshot 1" in fake.lines
        assert_consistent(cache_of(model), fake)
        assert set(fake.held.slots) == {0, 1}  # the two system parts' snaps, not A


async def test_a_refused_restore_runs_the_request_cold(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(refusals=(Refuse("restore", "empty_slot"),))
    model = served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8, parallel=2,
                         deterministic=True)
    async with serving(model):
        fake = fakes.latest()
        a1 = [*system(9), *user("hi")]
        a2 = [*a1, *await ask(model, a1), *user("more")]
        start = len(fake.lines)
        assert await ask(model, a2) == reply(a2)
        lines = commands(fake, start)
        assert lines[0].startswith("restore 1 ")
        assert lines[1] == f"generate ids:<{len(a2)}> {N_GEN} seq=0 reuse=0 marks={SYSTEM}"
        assert fake.decoded[-1].reused == 0


async def test_a_failed_slot_command_in_prepare_runs_the_request_cold(
    fakes: FakeDaemons,
) -> None:
    """``prepare`` frees the slot a cancelled request may have filled; a daemon that
    refuses that (not ``empty_slot``) makes the request run without the cache."""
    fakes.defaults["model"] = Behaviour(refusals=(Refuse("free_snapshot", "snapshot_failed"),))
    async with serving(served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8)) as model:
        fake = fakes.latest()
        first = [*system(10), *user("hi")]
        await ask(model, first, leave_after=1)  # its snap=: unknown whether it was taken
        start = len(fake.lines)
        second = [*system(11), *user("hi")]
        assert await ask(model, second) == reply(second)
        lines = commands(fake, start)
        assert lines[0] == "free_snapshot 0"
        assert lines[-1].startswith(f"generate ids:<{len(second)}> {N_GEN} reuse=0")


async def test_a_cancelled_request_leaves_the_cache_consistent(fakes: FakeDaemons) -> None:
    async with serving(served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8)) as model:
        fake, cache = fakes.latest(), cache_of(model)
        await ask(model, [*system(12), *user("hi")], leave_after=1)
        # The snapshot was taken (during the prefill) but no summary says so: the slot is
        # stale, and the next request frees it before using the slots.
        assert 0 in cache._stale_slots and 0 in fake.held.slots
        start = len(fake.lines)
        await ask(model, [*system(13), *user("hi")])
        assert commands(fake, start)[0] == "free_snapshot 0"
        assert_consistent(cache, fake)


# --- the disk tier -----------------------------------------------------------------------------

async def wait_for_files(folder: Path, count: int) -> list[Path]:
    with trio.fail_after(5):
        while len(files := sorted(folder.glob("*/*.lsnap"))) < count:  # noqa: ASYNC110
            await trio.sleep(0.001)
    return files


async def test_a_restarted_daemon_finds_the_prefix_on_disk(
    fakes: FakeDaemons, tmp_path: Path,
) -> None:
    settings = CacheSettings(ram_bytes=1 << 30, disk_dir=tmp_path)
    async with serving(served_model(cache=settings, slots=8)) as model:
        prompt = [*system(14), *user("hi")]
        first = await ask(model, prompt)
        assert len(await wait_for_files(tmp_path, 1)) == 1
        assert fakes.latest().words.count("save_slot") == 1
        fake = await restart(model, fakes)
        start = len(fake.lines)
        assert await ask(model, prompt) == first
        assert commands(fake, start) == [
            "load_slot 0 <path>", f"generate ids:<{len(prompt)}> {N_GEN} marks={SYSTEM}"]
        assert fake.decoded[-1].cache_slot == 0 and fake.decoded[-1].reused == SYSTEM
        assert cache_of(model).stats.disk_loads == 1


async def test_a_file_the_daemon_refuses_is_counted_and_removed(
    fakes: FakeDaemons, tmp_path: Path,
) -> None:
    settings = CacheSettings(ram_bytes=1 << 30, disk_dir=tmp_path)
    async with serving(served_model(cache=settings, slots=8)) as model:
        prompt = [*system(15), *user("hi")]
        await ask(model, prompt)
        (path,) = await wait_for_files(tmp_path, 1)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        fake = await restart(model, fakes)
        assert await ask(model, prompt) == reply(prompt)
        assert "load_slot" in fake.words and fake.decoded[-1].reused == 0
        assert cache_of(model).stats.disk_rejected == 1
        # Removed; the new daemon's snapshot of the prefix may since have replaced it.
        assert not path.exists() or path.read_bytes() != bytes(data)


async def test_eviction_by_the_disk_budget(fakes: FakeDaemons, tmp_path: Path) -> None:
    settings = CacheSettings(ram_bytes=1 << 30, disk_dir=tmp_path, disk_bytes=1)
    async with serving(served_model(cache=settings, slots=8)) as model:
        await ask(model, [*system(16), *user("hi")])
        await wait_until_written(cache_of(model), 1)
        await ask(model, [*system(17), *user("hi")])
        await wait_until_written(cache_of(model), 3)  # its snap, and the first conversation
        assert cache_of(model).stats.evictions_disk >= 2
        assert len(list(tmp_path.glob("*/*.lsnap"))) <= 1


async def wait_until_written(cache: PrefixCache, count: int) -> None:
    with trio.fail_after(5):
        while cache.stats.disk_writes < count:  # noqa: ASYNC110
            await trio.sleep(0.001)


async def test_the_cache_follows_a_new_daemon(fakes: FakeDaemons) -> None:
    """A restarted daemon holds no slots: the cache forgets its RAM tier with it."""
    async with serving(served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8)) as model:
        await ask(model, [*system(18), *user("hi")])
        assert cache_of(model)._entries
        fake = await restart(model, fakes)
        client: DaemonClient = await model.supervisor.wait_ready()
        assert client.pid == fake.pid
        assert not cache_of(model)._entries and cache_of(model).stats.ram_bytes == 0
        await ask(model, [*system(18), *user("hi")])
        assert_consistent(cache_of(model), fakes.latest())


# --- lanes: several sequences ------------------------------------------------------------------

async def test_on_several_sequences_each_conversation_returns_to_its_own(
    fakes: FakeDaemons,
) -> None:
    model = served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8, parallel=3)
    async with serving(model):
        fake = fakes.latest()
        history = {name: [*system(20), *user(name)] for name in ("ant", "bee", "cat")}
        lane = {}
        for name, prompt in history.items():
            history[name] = [*prompt, *await ask(model, prompt)]
            lane[name] = fake.decoded[-1].seq
        assert sorted(lane.values()) == [0, 1, 2]  # each on an empty sequence
        # The later two took the shared system part from the first's sequence (9.7).
        assert [d.reused for d in fake.decoded] == [0, SYSTEM, SYSTEM]
        for name in reversed(history):  # not the order the sequences were last used in
            prompt = [*history[name], *user("next")]
            start = len(fake.lines)
            await ask(model, prompt)
            # Back on its own sequence, which holds its whole history: nothing copied.
            assert commands(fake, start) == [
                f"generate ids:<{len(prompt)}> {N_GEN} seq={lane[name]} marks={SYSTEM}"]
            assert fake.decoded[-1].reused == len(history[name]) - 1
        # A fourth conversation takes the least recently used sequence (cat's, the first
        # of the second round), which is saved first.
        start = len(fake.lines)
        await ask(model, [*system(21), *user("dog")])
        assert commands(fake, start)[0] == f"snapshot 1 seq={lane['cat']}"
        assert fake.decoded[-1].seq == lane["cat"]
        assert_consistent(cache_of(model), fake)


async def test_a_busy_sequence_is_not_saved_and_nothing_fails(fakes: FakeDaemons) -> None:
    """``embed`` clears every sequence; before it the cache saves each idle one, and one
    still generating refuses its snapshot (``seq_busy``), which is skipped."""
    model = served_model(cache=CacheSettings(ram_bytes=1 << 30), slots=8, parallel=2)
    async with serving(model):
        fake, cache = fakes.latest(), cache_of(model)
        await ask(model, [*system(22), *user("idle")])
        client = await model.supervisor.wait_ready()
        busy_prompt = [*system(23), *user("busy")]
        async with cache.sequence(client, busy_prompt) as busy:
            assert busy is not None and busy != fake.decoded[-1].seq
            cache._lanes[busy].hold(bytes(4 * 100), 100)  # what it held before this one
            async with client.generate(busy_prompt, 500, seq=busy) as stream:
                await stream.__anext__()
                await cache.before_live_cleared(client)
        snapshots = [line for line in fake.lines if line.startswith("snapshot")]
        assert snapshots == [f"snapshot 1 seq={1 - busy}", f"snapshot 2 seq={busy}"]
        assert fake.words.count("cancel") == 1  # the busy one, left early
        # The idle conversation was saved; the busy one's refusal left nothing behind.
        assert sorted(len(s.tokens) for s in fake.held.slots.values()) == [
            SYSTEM, SYSTEM + 5 + N_GEN - 1]
        assert_consistent(cache, fake)
