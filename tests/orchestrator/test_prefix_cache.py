"""The prefix cache through the server (orchestrator/prefix_cache.py, PROTOCOL.md 5.10).

Two servers serve the same models, one with the cache (host RAM and a disk tier) and
one with ``--cache-ram 0``; an agent-like conversation (a long system prompt, then
turns that each send the whole history back) must get the same greedy answers from both,
and the cached server must say, in every dialect's usage field, how much it reused.

Equality holds where the engine computes a position the same way whatever the batch:
the test models run in the deterministic mode (``deterministic = true``, batch-invariant
kernels, PROTOCOL.md section 1), where a reused prefix and a recomputed one are bit for
bit the same. The default gemma3-270m runs with the defaults here, where a reused state
may round differently at a near-tie (docs/benchmarks.md, "Greedy divergence and the
deterministic mode"), so for it the test checks the
reuse and not the tokens (tests/native/test_deterministic.py checks its tokens in the
mode).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemons.client import DaemonClient, open_daemon
from daemons.roles import ROLES, DaemonLaunch
from orchestrator.prefix_cache import CacheSettings, PrefixCache, token_bytes
from tests.conftest import LucernaServer

EQUAL = ("qwen3", "qwen35", "laguna", "qwen35-draft")
SYSTEM = ("You are a coding agent. Tools: read_file(path), write_file(path, text), "
          "run(command), search(pattern). Answer briefly. ") * 6


def config(path: Path, test_models: dict[str, Path]) -> Path:
    models = {"qwen3": test_models["qwen3"], "qwen35": test_models["qwen35"],
              "laguna": test_models["laguna"], "qwen35-draft": test_models["qwen35"]}
    tables = []
    for name, gguf in models.items():
        draft = f'draft = "{test_models["dflash"]}"\n' if name.endswith("-draft") else ""
        # parallel = 1: with the prefix cache off (the uncached server) the default would
        # batch (docs/batching.md); both servers decode one request at a time here.
        tables.append(f'[[models]]\nname = "{name}"\npath = "{gguf}"\nn_ctx = 2048\nthreads = 1\n'
                      f'chunk = 64\nparallel = 1\ndeterministic = true\n{draft}')
    tables.append('[[models]]\nname = "gemma3-270m"\npath = "default"\nn_ctx = 2048\n'
                  'threads = 1\nchunk = 64\nparallel = 1\n')
    path.write_text("\n".join(tables))
    return path


@pytest.fixture(scope="module")
def servers(native: Any, default_model: Path, test_models: dict[str, Path],
            tmp_path_factory: Any) -> Iterator[tuple[LucernaServer, LucernaServer]]:
    tmp = tmp_path_factory.mktemp("prefix_cache")
    toml = config(tmp / "models.toml", test_models)
    disk = tmp / "kv"
    cached = LucernaServer(tmp / "cached.log", "--config", str(toml), "--cache-ram", "512",
                           "--kv-cache-dir", str(disk))
    try:
        uncached = LucernaServer(tmp / "uncached.log", "--config", str(toml), "--cache-ram", "0")
        try:
            cached.wait_healthy()
            uncached.wait_healthy()
            yield cached, uncached
        finally:
            uncached.stop()
    finally:
        cached.stop()


def chat(server: LucernaServer, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=300, json={
        "model": model, "messages": messages, "max_tokens": 10, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def converse(server: LucernaServer, model: str, topic: str, turns: int = 3,
             system: str = SYSTEM) -> list[tuple[str, int, int]]:
    """(answer, prompt tokens, cached tokens) of each turn of a growing conversation."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    out = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Step {turn} of {topic}: what next?"})
        body = chat(server, model, messages)
        answer = body["choices"][0]["message"]["content"]
        usage = body["usage"]
        out.append((answer, usage["prompt_tokens"],
                    usage["prompt_tokens_details"]["cached_tokens"]))
        messages.append({"role": "assistant", "content": answer})
    return out


@pytest.mark.parametrize("model", EQUAL)
def test_every_turn_is_the_same_with_and_without_the_cache(
        servers: tuple[LucernaServer, LucernaServer], model: str) -> None:
    cached, uncached = servers
    with_cache = converse(cached, model, "the lamp repair")
    without = converse(uncached, model, "the lamp repair")
    assert [a for a, _, _ in with_cache] == [a for a, _, _ in without]
    assert all(c == 0 for _, _, c in without)
    # Turn 1 is new; every later turn reuses at least the previous turn's prompt.
    previous = 0
    for turn, (_, n_prompt, n_cached) in enumerate(with_cache):
        if turn > 0:
            assert previous <= n_cached < n_prompt, (model, with_cache)
        previous = n_prompt


def test_interleaved_conversations_and_a_shared_system_prompt_each_keep_their_prefix(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, uncached = servers
    interleave_conversations(cached, uncached, "qwen35", SYSTEM, ("pumps", "valves", "gears"))


def interleave_conversations(cached: LucernaServer, uncached: LucernaServer, model: str,
                             system: str, topics: tuple[str, ...]) -> None:
    """Two turns of one conversation per topic, all with one system prompt, taken in
    turn: each reply equals the uncached server's, each first turn after the first
    found the shared system prompt, and each second turn its own history."""
    threads: dict[str, list[dict[str, Any]]] = {
        topic: [{"role": "system", "content": system}] for topic in topics}
    for turn in range(2):
        for topic, messages in threads.items():
            messages.append({"role": "user", "content": f"Turn {turn} about {topic}."})
            body = chat(cached, model, messages)
            expected = chat(uncached, model, messages)
            assert body["choices"][0]["message"] == expected["choices"][0]["message"]
            n_cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
            if turn == 0:
                # A new conversation whose system prompt another one already sent.
                assert topic == topics[0] or n_cached >= 100, (topic, body["usage"])
            else:
                # Its own history came back although the others ran in between.
                assert n_cached > body["usage"]["prompt_tokens"] - 30, (topic, body["usage"])
            messages.append({"role": "assistant",
                             "content": body["choices"][0]["message"]["content"]})


def test_the_default_model_reuses_its_prefix(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, _ = servers
    turns = converse(cached, "gemma3-270m", "window cleaning")
    assert all(n_cached >= previous for (_, previous, _), (_, _, n_cached)
               in itertools.pairwise(turns)), turns


def test_every_dialect_reports_the_cached_tokens(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, _ = servers
    url = cached.base_url
    system = SYSTEM + " Dialect check."
    for _ in range(2):  # the second round finds the first's prefix
        responses = httpx.post(f"{url}/v1/responses", timeout=120, json={
            "model": "qwen3", "instructions": system, "input": "hello", "max_output_tokens": 4,
            "temperature": 0}).json()
        messages = httpx.post(f"{url}/v1/messages", timeout=120, json={
            "model": "qwen3", "system": system, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "hello"}]}).json()
    assert responses["usage"]["input_tokens_details"]["cached_tokens"] > 100
    usage = messages["usage"]
    assert usage["cache_read_input_tokens"] > 100
    # Anthropic counts cached input apart from input_tokens: together, the whole prompt.
    counted = httpx.post(f"{url}/v1/messages/count_tokens", timeout=120, json={
        "model": "qwen3", "system": system,
        "messages": [{"role": "user", "content": "hello"}]}).json()["input_tokens"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == counted
    completions = [httpx.post(f"{url}/v1/completions", timeout=120, json={
        "model": "qwen3", "prompt": system + " once more", "max_tokens": 3,
        "temperature": 0}).json() for _ in range(2)]
    assert completions[1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 100


def test_metrics_and_status_show_the_cache(
        servers: tuple[LucernaServer, LucernaServer]) -> None:
    cached, uncached = servers
    converse(cached, "qwen3", "metrics", turns=2)
    status = httpx.get(f"{cached.base_url}/status").json()["models"]["qwen3"]["prefix_cache"]
    assert status["enabled"] and status["hits"] >= 1 and status["tokens_reused"] > 0
    assert status["ram_budget_bytes"] == (512 << 20) // 5
    assert status["ram_bytes"] <= status["ram_budget_bytes"]
    off = httpx.get(f"{uncached.base_url}/status").json()["models"]["qwen3"]["prefix_cache"]
    assert not off["enabled"] and off["hits"] == 0
    props = httpx.get(f"{cached.base_url}/props", params={"model": "qwen3"}).json()
    assert props["prefix_cache"]["ram_budget_bytes"] == status["ram_budget_bytes"]
    metrics = httpx.get(f"{cached.base_url}/metrics").text
    assert 'lucerna_prefix_cache_hits_total{model="qwen3"}' in metrics
    assert 'lucerna_prefix_cache_bytes{model="qwen3",tier="disk"}' in metrics
    assert "prefix cache: 102 MiB host RAM, disk" in cached.log()


def test_a_restart_finds_the_prefix_on_disk_and_refuses_tampered_files(
        native: Any, test_models: dict[str, Path], tmp_path: Path) -> None:
    toml = config(tmp_path / "models.toml", test_models)
    messages = [{"role": "system", "content": SYSTEM + " Restart check."},
                {"role": "user", "content": "Begin."}]

    def serve() -> LucernaServer:
        server = LucernaServer(tmp_path / "restart.log", "--config", str(toml), "--cache-ram",
                               "64", "--kv-cache-dir", str(tmp_path / "kv"))
        server.wait_healthy()
        return server

    first = serve()
    try:
        cold = chat(first, "qwen35", messages)
        assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        first.stop()
    files = sorted((tmp_path / "kv").glob("qwen35-*/*.lsnap"))
    assert files, "the system prompt's snapshot was written to disk"
    second = serve()
    try:
        warm = chat(second, "qwen35", messages)
        assert warm["choices"] == cold["choices"]
        assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= 100
    finally:
        second.stop()
    # Flip one byte of every file: each is refused, logged, removed; the answer holds.
    for path in files:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    third = serve()
    try:
        again = chat(third, "qwen35", messages)
        assert again["choices"] == cold["choices"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        status = httpx.get(f"{third.base_url}/status").json()["models"]["qwen35"]["prefix_cache"]
        assert status["disk_rejected"] >= 1
        assert "prefix cache file rejected" in third.log()
    finally:
        third.stop()
    left = {hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (tmp_path / "kv").glob("qwen35-*/*.lsnap")}
    assert not digests & left


# --- the cache's bookkeeping against a real daemon, without HTTP ------------------------

def qwen3_launch(native: Any, test_models: dict[str, Path], slots: int = 8) -> DaemonLaunch:
    return DaemonLaunch(role=ROLES["qwen35"], executable=native.binary("qwen35"),
                        model=test_models["qwen3"], n_ctx=1024, threads=1, chunk=32,
                        slots=slots)


def distinct_prompt(seed: int, n: int = 80) -> list[int]:
    return [1000 + (seed * 7919 + i * 104729) % 30000 for i in range(n)]


async def turn(cache: PrefixCache, client: DaemonClient, prompt: list[int],
               marks: tuple[int, ...], *, leave_after: int | None = None) -> list[int]:
    """One generation as generation.py drives it; ``leave_after`` tokens, then cancel."""
    snap = await cache.before_generate(client, prompt, marks)
    generated: list[int] = []
    stream = None
    try:
        async with client.generate(prompt, 6, ignore_eos=True, snap=snap, marks=marks) as stream:
            async for token in stream:
                generated.append(token)
                if leave_after is not None and len(generated) >= leave_after:
                    break
    finally:
        summary = stream.summary if stream is not None and stream.done else None
        cache.after_generate(prompt, generated, summary, snap)
    await cache.settle(client)
    return generated


async def wait_until(condition: Callable[[], bool]) -> None:
    # Polled: the disk writer announces nothing (it needs no event of its own).
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.05)


async def assert_consistent(cache: PrefixCache, client: DaemonClient) -> None:
    """What the cache indexes is exactly what the daemon's slots hold."""
    listing = await client.list_slots()
    assert {e.slot: e.n_tokens for e in cache._entries.values()} == listing.slots
    assert cache.stats.ram_bytes == listing.host_bytes


async def test_eviction_keeps_the_budget_in_lru_order(native: Any,
                                                      test_models: dict[str, Path]) -> None:
    async with open_daemon(qwen3_launch(native, test_models)) as client:
        probe = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 40), 8)
        await turn(probe, client, distinct_prompt(0), (64,))
        one = next(iter(probe._entries.values())).host_bytes
        # Room for two snapshots of a 64-token system prompt, not three.
        cache = PrefixCache("qwen3", CacheSettings(ram_bytes=2 * one + one // 2), 8)
        for seed in range(1, 5):
            await turn(cache, client, distinct_prompt(seed), (64,))
            await assert_consistent(cache, client)
            assert cache.stats.ram_bytes <= cache.settings.ram_bytes
        assert cache.stats.evictions_ram >= 2
        # Each new conversation also saved the one it replaced; least recently used
        # went first: the newest system prompt is held, the oldest ones are not.
        held = {e.tokens for e in cache._entries.values()}
        assert token_bytes(distinct_prompt(4)[:64]) in held
        assert not held & {token_bytes(distinct_prompt(s)[:64]) for s in (1, 2)}
        # The survivors are reused: a new conversation on system prompt 4.
        before = cache.stats.tokens_reused
        await turn(cache, client, [*distinct_prompt(4)[:64], 5, 6, 7], (64,))
        assert cache.stats.tokens_reused - before >= 64


async def test_a_cancelled_request_leaves_the_cache_consistent(
        native: Any, test_models: dict[str, Path]) -> None:
    async with open_daemon(qwen3_launch(native, test_models)) as client:
        cache = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 30), 8)
        # Leaves after its first token: the snapshot was taken (during the prefill) but
        # the summary never arrives, so the cache does not know it.
        await turn(cache, client, distinct_prompt(10), (64,), leave_after=1)
        await turn(cache, client, distinct_prompt(11), (64,))
        await assert_consistent(cache, client)
        await turn(cache, client, [*distinct_prompt(11)[:64], 1, 2], (64,))
        assert cache.stats.hits >= 1
        await assert_consistent(cache, client)


async def test_a_daemon_crash_between_snapshot_and_restore(
        native: Any, test_models: dict[str, Path], tmp_path: Path) -> None:
    cache = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 30, disk_dir=tmp_path), 8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cache.run_disk_writer)
        async with open_daemon(qwen3_launch(native, test_models)) as client:
            cache.daemon_started(client)
            first = await turn(cache, client, distinct_prompt(20), (64,))
            with trio.fail_after(30):  # the writer saves the snapshot between requests
                await wait_until(lambda: bool(list(tmp_path.glob("*/*.lsnap"))))
            os.kill(client.pid, signal.SIGKILL)
            await client.exited.wait()
        # The restarted daemon holds no slot: the cache forgets its RAM tier, and finds
        # the prefix again on disk.
        async with open_daemon(qwen3_launch(native, test_models)) as client:
            cache.daemon_started(client)
            assert not cache._entries and cache.stats.ram_bytes == 0
            again = await turn(cache, client, distinct_prompt(20), (64,))
            assert again == first
            assert cache.stats.disk_loads == 1
            await assert_consistent(cache, client)
        nursery.cancel_scope.cancel()


async def test_a_request_while_a_snapshot_is_written(
        native: Any, test_models: dict[str, Path], tmp_path: Path) -> None:
    """The disk writer and a request share the daemon: the request waits for the write
    (one command at a time) and the file is whole."""
    cache = PrefixCache("qwen3", CacheSettings(ram_bytes=1 << 30, disk_dir=tmp_path), 8)
    async with open_daemon(qwen3_launch(native, test_models)) as client:
        cache.daemon_started(client)
        await turn(cache, client, distinct_prompt(30), (64,))
        pinned = [e for e in cache._entries.values() if e.pinned]
        assert pinned, "the new snapshot waits for its disk write"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cache.run_disk_writer)
            # No checkpoint of the scheduler: the request runs while the write is queued.
            tokens = await turn(cache, client, [*distinct_prompt(30)[:64], 9, 9, 9], (64,))
            assert tokens
            with trio.fail_after(30):
                await wait_until(lambda: len(list(tmp_path.glob("*/*.lsnap"))) == 2)
            nursery.cancel_scope.cancel()
        # The system prompt's snapshot, and the first conversation, saved when the second
        # replaced it: each file whole, none left half-written.
        files = list(tmp_path.glob("*/*.lsnap"))
        assert not list(tmp_path.glob("*/*.tmp-*"))
        loaded = {(await client.load_slot(7, path)).n_tokens for path in files}
        assert loaded == {64, 80 + 6 - 1}
