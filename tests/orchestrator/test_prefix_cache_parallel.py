"""The prefix cache on a model served with several sequences (``parallel = 4``; issue 13
item 5, orchestrator/prefix_cache.py and prefix_cache_lanes.py).

Two servers serve the same models with ``parallel = 4``: one with the cache (host RAM and
a disk tier), one with ``--cache-ram 0``, whose every request prefills cold. Equality:
the models run with ``deterministic = true`` (``--deterministic=on``, batch-invariant
kernels, PROTOCOL.md section 1 and 9.4), where a reused prefix is bit for bit a
recomputed one and a sequence decoded beside others is bit for bit its solo run, so the
cached server's answers must equal the cold server's token for token, concurrent
conversations included. Two more models, ``parallel = 2`` with the defaults (not
deterministic), one with two spare sequences and one without, show what the spares keep
(docs/batching.md, "Spare sequences"); their reuse is checked, not their tokens.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemons.client import DaemonClient
from daemons.native import NativeBuild
from daemons.roles import ROLES, DaemonLaunch
from orchestrator.parallel_default import DEFAULT_PARALLEL_CAP
from orchestrator.prefix_cache import CacheSettings, PrefixCache
from orchestrator.slots import SlotClient, open_slot_client
from tests.conftest import LucernaServer
from tests.orchestrator.test_prefix_cache import (
    chat,
    converse,
    distinct_prompt,
    interleave_conversations,
)

PARALLEL = 4
MODELS = ("qwen3", "qwen35")  # attention-only, and hybrid (recurrent state per sequence)
SYSTEM = ("You are a coding agent. Tools: read_file(path), write_file(path, text), "
          "run(command), search(pattern). Answer briefly. ") * 6


def config(path: Path, test_models: dict[str, Path]) -> Path:
    tables = [f'[[models]]\nname = "{name}"\npath = "{test_models[name]}"\nn_ctx = 2048\n'
              f'threads = 1\nchunk = 64\nparallel = {PARALLEL}\ndeterministic = true\n'
              for name in MODELS]
    # Two sequences that run and two spare ones, against two without spares, with the
    # defaults otherwise (one pool, where the daemon's own sequences are reused).
    for name, spares in (("spares", 2), ("no-spares", 0)):
        tables.append(f'[[models]]\nname = "{name}"\npath = "{test_models["qwen35"]}"\n'
                      f'n_ctx = 2048\nthreads = 1\nchunk = 64\nparallel = 2\n'
                      f'spare_sequences = {spares}\n')
    # parallel left out: the default, fitted to the memory, with the cache on.
    tables.append(f'[[models]]\nname = "auto"\npath = "{test_models["qwen3"]}"\nn_ctx = 512\n'
                  'threads = 1\n')
    path.write_text("\n".join(tables))
    return path


@pytest.fixture(scope="module")
def servers(native: NativeBuild, test_models: dict[str, Path],
            tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[LucernaServer, LucernaServer]]:
    tmp = tmp_path_factory.mktemp("prefix_cache_parallel")
    toml = config(tmp / "models.toml", test_models)
    cached = LucernaServer(tmp / "cached.log", "--config", str(toml), "--cache-ram", "512",
                           "--kv-cache-dir", str(tmp / "kv"))
    try:
        cold = LucernaServer(tmp / "cold.log", "--config", str(toml), "--cache-ram", "0")
        try:
            cached.wait_healthy()
            cold.wait_healthy()
            yield cached, cold
        finally:
            cold.stop()
    finally:
        cached.stop()


def converse_at_once(server: LucernaServer, model: str, topics: list[str],
                     turns: int) -> dict[str, list[tuple[str, int, int]]]:
    """``converse`` for every topic at once, one thread each."""
    results: dict[str, list[tuple[str, int, int]]] = {}
    errors: list[BaseException] = []

    def run(topic: str) -> None:
        try:
            results[topic] = converse(server, model, topic, turns, system=SYSTEM)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(topic,)) for topic in topics]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def system_tokens(server: LucernaServer, model: str) -> int:
    """Tokens of the system part and a one-word user turn (a bound above the system
    part's own), as the chat template renders them."""
    response = httpx.post(f"{server.base_url}/v1/messages/count_tokens", timeout=60, json={
        "model": model, "system": SYSTEM, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 200, response.text
    return int(response.json()["input_tokens"])


@pytest.mark.parametrize("model", [*MODELS, "auto"])
def test_an_agent_conversation_reuses_its_history_with_several_sequences(
        servers: tuple[LucernaServer, LucernaServer], model: str) -> None:
    """Four sequences in the deterministic mode (one KV stream each: the cache restores
    from slots), and the default parallel with the defaults (one pool: the daemon's own
    sequences and 9.7 serve it)."""
    cached, cold = servers
    with_cache = converse(cached, model, "the pump overhaul", turns=8, system=SYSTEM)
    without = converse(cold, model, "the pump overhaul", turns=8, system=SYSTEM)
    if model in MODELS:
        # Deterministic mode: token for token. "auto" runs with the defaults, where a
        # reused state may round differently at a near-tie (test_prefix_cache.py): its
        # reuse is checked, not its tokens.
        assert [a for a, _, _ in with_cache] == [a for a, _, _ in without]
    assert all(c == 0 for _, _, c in without)
    # Turn 1 is new; every later turn reuses at least the previous turn's prompt, as
    # with one sequence (tests/orchestrator/test_prefix_cache.py).
    previous = 0
    for turn, (_, n_prompt, n_cached) in enumerate(with_cache):
        if turn > 0:
            assert previous <= n_cached < n_prompt, (model, with_cache)
        previous = n_prompt


def concurrent_turns(cached: LucernaServer, cold: LucernaServer, model: str
                     ) -> tuple[dict[str, list[tuple[str, int, int]]],
                                dict[str, list[tuple[str, int, int]]]]:
    """Four conversations with one system prompt, three turns each, all at once, on the
    cached and on the cold server."""
    topics = [f"{model} {name}" for name in ("kilns", "looms", "sluices", "winches")]
    return (converse_at_once(cached, model, topics, turns=3),
            converse_at_once(cold, model, topics, turns=3))


@pytest.mark.parametrize("model", MODELS)
def test_concurrent_conversations_share_their_system_prompt(
        servers: tuple[LucernaServer, LucernaServer], model: str) -> None:
    cached, cold = servers
    with_cache, without = concurrent_turns(cached, cold, model)
    n_system = system_tokens(cached, model)
    assert n_system > 100
    for topic, turns in with_cache.items():
        assert all(c == 0 for _, _, c in without[topic])
        previous = 0
        for turn, (_, n_prompt, n_cached) in enumerate(turns):
            if turn > 0:
                # The shared system prompt and this conversation's own history.
                assert n_cached > n_system and previous <= n_cached < n_prompt, (topic, turns)
            previous = n_prompt
    if model == "qwen3":
        # Token for token the cold runs' answers (deterministic mode, see the docstring).
        assert ({t: [a for a, _, _ in v] for t, v in with_cache.items()}
                == {t: [a for a, _, _ in v] for t, v in without.items()})


def test_concurrent_hybrid_conversations_equal_their_cold_runs(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, cold = servers
    with_cache, without = concurrent_turns(cached, cold, "qwen35")
    assert ({t: [a for a, _, _ in v] for t, v in with_cache.items()}
            == {t: [a for a, _, _ in v] for t, v in without.items()})


def test_more_conversations_than_sequences_each_keep_their_prefix(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    """Six conversations taking turns on four sequences: each sequence a conversation
    leaves is snapshotted (``snapshot <slot> seq=S``) before another takes it, and the
    conversation's next turn finds its history in that slot, on whichever sequence."""
    cached, cold = servers
    model = "qwen35"
    before = httpx.get(f"{cached.base_url}/status").json()["models"][model]["prefix_cache"]
    interleave_conversations(cached, cold, model, SYSTEM + " Six threads.",
                             ("pumps", "valves", "gears", "belts", "cams", "shafts"))
    after = httpx.get(f"{cached.base_url}/status").json()["models"][model]["prefix_cache"]
    assert after["ram_entries"] > before["ram_entries"]
    assert after["hits"] - before["hits"] >= 11


def four_conversations_in_turn(server: LucernaServer, model: str) -> tuple[int, int]:
    """Four conversations on a hybrid model, two turns each, one request at a time: the
    snapshots the cache took during the second turns, and the most prompt tokens a
    second turn did not find cached."""
    topics = ("lathes", "presses", "drills", "saws")
    threads = {t: [{"role": "system", "content": SYSTEM + " Spares."}] for t in topics}
    before = 0
    short = 0
    for turn in range(2):
        if turn == 1:
            before = status_of(server, model)["prefix_cache"]["ram_entries"]
        for topic, messages in threads.items():
            messages.append({"role": "user", "content": f"Turn {turn} about {topic}."})
            body = chat(server, model, messages)
            usage = body["usage"]
            if turn == 1:
                n_cached = usage["prompt_tokens_details"]["cached_tokens"]
                short = max(short, usage["prompt_tokens"] - n_cached)
            messages.append({"role": "assistant",
                             "content": body["choices"][0]["message"]["content"]})
    return status_of(server, model)["prefix_cache"]["ram_entries"] - before, short


def status_of(server: LucernaServer, model: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server.base_url}/status").json()["models"][model])


def test_spare_sequences_keep_conversations_where_they_ran(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    """Four conversations taking turns on a model that runs two at once: with two spare
    sequences each conversation's next turn continues on the sequence it left, so the
    cache copies nothing out of the daemon (no snapshot of a displaced conversation: on
    the H200 each cost 50-130 ms of every running stream's time: git show
    7a0c96e:docs/benchmarks.md, "Admissions and the prefix cache on the H200"),
    and each second turn prefills only its new tokens. Without spares the same turns
    displace each other and the cache snapshots them."""
    cached, _ = servers
    status = status_of(cached, "spares")
    assert status["parallel_choice"]["spare_sequences"] == 2
    snapshots, short = four_conversations_in_turn(cached, "spares")
    assert snapshots == 0
    assert short < 30  # the new user turn and the template's tokens around it
    snapshots, short = four_conversations_in_turn(cached, "no-spares")
    assert snapshots >= 2


def test_a_daemon_killed_between_turns_costs_the_conversation_nothing(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    """Deterministic mode (the cache snapshots each conversation after every turn): a
    SIGKILL of the daemon between two turns loses the RAM tier; the next turn is served
    on the restarted daemon with the cold run's answer, its system part from disk."""
    cached, cold = servers
    model = "qwen3"
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM + " Kill check."}]
    for turn in range(3):
        if turn == 2:
            status = httpx.get(f"{cached.base_url}/status").json()["models"][model]
            os.kill(status["pid"], signal.SIGKILL)
        messages.append({"role": "user", "content": f"Turn {turn} of the kill check."})
        body = chat(cached, model, messages)
        assert body["choices"][0]["message"] == chat(cold, model, messages)["choices"][0]["message"]
        usage = body["usage"]
        n_cached = usage["prompt_tokens_details"]["cached_tokens"]
        if turn == 1:
            assert n_cached > usage["prompt_tokens"] - 30, usage
        elif turn == 2:
            # The disk is searched at the prompt's marks (the system part's end) and its
            # whole length (docs/prefix-cache.md), as with one sequence.
            assert n_cached >= 100, usage
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    after = httpx.get(f"{cached.base_url}/status").json()["models"][model]
    assert after["pid"] != status["pid"] and after["prefix_cache"]["disk_loads"] >= 1


def test_props_and_status_show_the_default_parallel_with_the_cache_on(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, _ = servers
    props = httpx.get(f"{cached.base_url}/props", params={"model": "auto"}).json()
    choice = props["parallel_choice"]
    # The tiny test model fits the cap on any machine that runs the tests.
    assert choice["source"] == "memory" and choice["parallel"] == DEFAULT_PARALLEL_CAP
    assert props["prefix_cache"]["enabled"]
    status = httpx.get(f"{cached.base_url}/status").json()["models"]["auto"]
    assert status["parallel_choice"] == choice and status["prefix_cache"]["enabled"]
    converse(cached, "auto", "defaults", turns=2, system=SYSTEM)
    after = httpx.get(f"{cached.base_url}/status").json()["models"]["auto"]["prefix_cache"]
    assert after["hits"] >= 1 and after["tokens_reused"] > 0


# --- the cache's bookkeeping against a real --parallel daemon, without HTTP ----------------

def parallel_launch(native: NativeBuild, test_models: dict[str, Path]) -> DaemonLaunch:
    return DaemonLaunch(role=ROLES["qwen35"], executable=native.binary("qwen35"),
                        model=test_models["qwen3"], n_ctx=1024 * PARALLEL, threads=1, chunk=32,
                        slots=8, parallel=PARALLEL)


async def turn(cache: PrefixCache, client: DaemonClient, prompt: list[int],
               marks: tuple[int, ...]) -> tuple[int | None, list[int]]:
    """One generation as generation.py drives it: (its sequence, its tokens)."""
    async with cache.sequence(client, prompt) as seq:
        snap = await cache.before_generate(client, prompt, marks, seq)
        generated: list[int] = []
        stream = None
        try:
            async with client.generate(prompt, 6, ignore_eos=True, snap=snap, marks=marks,
                                       seq=seq) as stream:
                generated = [token async for token in stream]
        finally:
            cache.after_generate(prompt, generated, stream.summary if stream else None, snap, seq)
    await cache.settle(client)
    return seq, generated


async def assert_consistent(cache: PrefixCache, client: DaemonClient) -> None:
    """What the cache indexes is exactly what the daemon's slots hold."""
    listing = await client.list_slots()
    assert {e.slot: e.n_tokens for e in cache._entries.values()} == listing.slots
    assert not any(e.pending for e in cache._entries.values())


async def test_concurrent_turns_keep_the_index_consistent_and_return_to_their_sequence(
        native: NativeBuild, test_models: dict[str, Path]) -> None:
    async with open_slot_client(parallel_launch(native, test_models)) as client:
        assert isinstance(client, SlotClient)
        cache = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 30), 8)
        shared = distinct_prompt(0, 64)
        prompts = [[*shared, *distinct_prompt(seed, 20)] for seed in range(1, PARALLEL + 1)]
        first: dict[int, int | None] = {}

        async def one(i: int) -> None:
            first[i], _ = await turn(cache, client, prompts[i], (64,))

        async with trio.open_nursery() as nursery:
            for i in range(PARALLEL):
                nursery.start_soon(one, i)
        assert sorted(s for s in first.values() if s is not None) == list(range(PARALLEL))
        await assert_consistent(cache, client)
        # The system part was snapshotted once, however many asked at once.
        assert [e.n_tokens for e in cache._entries.values()] == [64]
        # Each conversation's next turn runs where it left its history, and reuses it.
        for i in range(PARALLEL):
            before = cache.stats.tokens_reused
            seq, _ = await turn(cache, client, [*prompts[i], 7, 8, 9], (64,))
            assert seq == first[i]
            assert cache.stats.tokens_reused - before >= len(prompts[i])
        await assert_consistent(cache, client)


async def test_a_busy_sequence_is_not_saved_and_nothing_fails(
        native: NativeBuild, test_models: dict[str, Path]) -> None:
    """``embed`` clears every sequence; before it the cache saves each idle one, and one
    still generating refuses its snapshot (``seq_busy``), which is skipped."""
    async with open_slot_client(parallel_launch(native, test_models)) as client:
        cache = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 30), 8)
        seq_a, _ = await turn(cache, client, distinct_prompt(40), (64,))
        async with cache.sequence(client, distinct_prompt(41)) as seq_b:
            assert seq_b is not None and seq_b != seq_a
            cache._lanes[seq_b].hold(b"\0" * 4 * 100, 100)  # what it held before this one
            async with client.generate(distinct_prompt(41), 200, ignore_eos=True,
                                       seq=seq_b) as stream:
                await stream.__anext__()
                await cache.before_live_cleared(client)
                await stream.collect()
        held = sorted(e.n_tokens for e in cache._entries.values())
        assert held == [64, 80 + 6 - 1]  # the system part, and sequence A; not B
        await assert_consistent(cache, client)
