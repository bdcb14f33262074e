"""The prefix cache: a token prefix whose state was computed once is restored, not
recomputed (PROTOCOL.md 5.10).

Three tiers, one idea:

- **The daemon's live sequence** (and its checkpoints): a ``generate`` whose prompt
  extends what the daemon holds prefills only the rest. The daemon does this itself;
  nothing here has to ask.
- **Host RAM**: snapshots in the daemon's slots, indexed here by their token prefix.
  The front end takes them where conversations begin to differ: at the end of the
  shared system prompt and tools (the first mark of a prompt), and, when a request is
  about to replace a conversation the daemon holds, that conversation's whole state (so
  interleaved conversations each keep theirs). The daemon's ``generate`` restores the
  longest slot whose tokens start the prompt. LRU within a byte budget.
- **Disk** (``kv_cache_dir``): every RAM snapshot is also written to a file named by the
  hash of its tokens, under the daemon's ``state_id`` (the model file, engine build and
  every setting that changes the state), so a restarted daemon or server finds it. The
  daemon checks each file's identity and checksum when loading it; a file it refuses
  is counted, logged and deleted. LRU by file time within a byte budget
  (``orchestrator.prefix_cache_disk``).

A model with ``parallel = N`` (orchestrator/slots.py) runs up to N requests at once,
each on its own daemon sequence, and the three tiers serve each as they serve one:
the request's sequence is the free one that holds its conversation
(``orchestrator.prefix_cache_lanes``), the conversation it replaces is snapshotted from
that sequence (``snapshot <slot> seq=S``, PROTOCOL.md 9.3), and the daemon's
``generate ... seq=S`` takes the longest of what S holds, a snapshot slot whose tokens
start the prompt, or a prefix another sequence holds (9.7). So conversations that run
at once share their system prompt in the pool, and ones that come later find it in a
slot. A daemon with one KV stream per sequence (the deterministic mode) cannot share in
its pool; there the cache restores from slots itself (``kv_split``).

Requests interleave at every ``await`` here (N at once, and the disk writer between
them), so whatever a step claims it claims before it awaits: a slot being filled or
freed is reserved, a ``snap=`` slot stays pending until its generation ends, and a slot
waiting to be written to disk is pinned; none of them can be evicted or reused
meanwhile. Nothing a cache step fails at loses a request: the daemon checks every
prefix it reuses, a refused snapshot is skipped, and a generation the daemon refuses
for the cache's sake runs again cold (orchestrator/generation.py).
"""

from __future__ import annotations

import logging
import math
import struct
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import trio

from daemons.client import DaemonClient
from daemons.errors import DaemonDiedError, DaemonReplyError
from orchestrator.prefix_cache_disk import SnapshotDir
from orchestrator.prefix_cache_lanes import Lanes
from orchestrator.slots import SlotClient
from protocol import GenerateSummary, SnapshotInfo

__all__ = [
    "DEFAULT_RAM_SHARE",
    "MAX_DEFAULT_RAM_BYTES",
    "CachePlan",
    "CacheSettings",
    "CacheStats",
    "PrefixCache",
    "default_ram_bytes",
    "kv_split",
]

log = logging.getLogger("lucerna.cache")

MIN_SNAPSHOT_TOKENS = 32
"""Prefixes shorter than this prefill faster than a slot is worth."""
MAX_DEFAULT_RAM_BYTES = 8 << 30
"""The default host-RAM budget is at most this (llama-server's ``--cache-ram`` default)..."""
DEFAULT_RAM_SHARE = 4
"""...and at most 1/this of the memory available when the server starts."""


def default_ram_bytes() -> int:
    """The host-RAM budget when none is configured: a quarter of available memory, at
    most 8 GiB."""
    available: int = psutil.virtual_memory().available
    return min(MAX_DEFAULT_RAM_BYTES, available // DEFAULT_RAM_SHARE)


@dataclass(frozen=True)
class CacheSettings:
    ram_bytes: int
    """Host-RAM budget for one model's snapshots; 0 turns the cache off (and every
    request prefills from token 0)."""
    disk_dir: Path | None = None
    disk_bytes: int = 0
    """Byte budget of ``disk_dir`` (per model); 0 with a dir means no limit."""

    @property
    def enabled(self) -> bool:
        return self.ram_bytes > 0


@dataclass
class CacheStats:
    """Counters for /metrics and /status."""

    hits: int = 0
    """Requests that reused at least one cached prompt token."""
    misses: int = 0
    tokens_reused: int = 0
    ram_bytes: int = 0
    disk_bytes: int = 0
    evictions_ram: int = 0
    evictions_disk: int = 0
    disk_writes: int = 0
    disk_loads: int = 0
    disk_rejected: int = 0
    """Files the daemon refused: another identity, truncated or corrupt."""


@dataclass(frozen=True)
class CachePlan:
    """How a generation runs, as ``PrefixCache.prepare`` set it up."""

    snap: tuple[int, int] | None
    """``snap=L:S`` to ask for: keep the prompt's shared part in slot ``S``."""
    restore: int | None
    """Start from this slot (``restore``) instead of a ``generate``."""
    reuse: bool
    """``generate``'s ``reuse=``: start from what the daemon holds (5.10, 9.7)."""
    keep: bool
    """Call ``keep_sequence`` after the generation."""


def kv_split(client: DaemonClient) -> bool:
    """The daemon keeps one KV stream per sequence (``--kv-unified=off``, which
    ``--deterministic=on`` with ``--parallel`` above 1 needs): the daemon's in-pool
    sharing (9.7) copies part of one sequence into another, which the engine supports
    only within one stream (it aborts the daemon otherwise), so such a daemon runs with
    ``reuse=0``, and the cache carries every conversation across turns in slots:
    snapshot after each generation, ``restore`` before the next."""
    return isinstance(client, SlotClient) and "--kv-unified=off" in client.argv


@dataclass
class _Entry:
    slot: int
    tokens: bytes
    """The prefix as int32 little-endian, for prefix tests by ``bytes.startswith``."""
    host_bytes: int = 0
    last_used: float = field(default_factory=time.monotonic)
    pinned: bool = False
    """A disk write is pending: the slot must not be freed or reused."""
    pending: bool = False
    """A ``snap=`` of a running generation: the daemon fills the slot (or not) during
    its prefill, and only its summary says which."""

    @property
    def n_tokens(self) -> int:
        return len(self.tokens) // 4


def token_bytes(ids: Sequence[int]) -> bytes:
    """Token ids as int32 little-endian, the daemons' token file format."""
    return struct.pack(f"<{len(ids)}i", *ids)


class PrefixCache:
    """One model's host-RAM and disk tiers; see the module docstring."""

    def __init__(self, model: str, settings: CacheSettings, n_slots: int) -> None:
        self.model = model
        self.settings = settings
        self.n_slots = n_slots
        self.stats = CacheStats()
        self._entries: dict[int, _Entry] = {}
        self._client: DaemonClient | None = None
        self._disk: SnapshotDir | None = None
        self._lanes = Lanes()
        """What each daemon sequence holds (one, 0, on a one-sequence daemon)."""
        self._stale_slots: set[int] = set()
        """Slots a cancelled request may have filled without our knowing."""
        self._reserved: set[int] = set()
        """Slots a request is filling or freeing across an ``await``: not free."""
        self._saves_send, self._saves_recv = trio.open_memory_channel[tuple[DaemonClient, _Entry]](
            math.inf)

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def describe(self) -> str:
        ram = f"{self.settings.ram_bytes >> 20} MiB host RAM"
        if not self.enabled:
            return "prefix cache off"
        if self.settings.disk_dir is None:
            return f"prefix cache: {ram}"
        disk = (f"{self.settings.disk_bytes >> 20} MiB" if self.settings.disk_bytes
                else "no limit")
        return f"prefix cache: {ram}, disk {self.settings.disk_dir} ({disk})"

    def status(self) -> dict[str, object]:
        """Budgets, fill and counters, for /status and /props."""
        return {
            "enabled": self.enabled,
            "ram_budget_bytes": self.settings.ram_bytes,
            "ram_bytes": self.stats.ram_bytes,
            "ram_entries": len(self._entries),
            "disk_dir": None if self.settings.disk_dir is None else str(self.settings.disk_dir),
            "disk_budget_bytes": self.settings.disk_bytes,
            "disk_bytes": self.stats.disk_bytes,
            "hits": self.stats.hits,
            "misses": self.stats.misses,
            "tokens_reused": self.stats.tokens_reused,
            "evictions_ram": self.stats.evictions_ram,
            "evictions_disk": self.stats.evictions_disk,
            "disk_writes": self.stats.disk_writes,
            "disk_loads": self.stats.disk_loads,
            "disk_rejected": self.stats.disk_rejected,
        }

    # --- daemon lifecycle -------------------------------------------------------------

    def daemon_started(self, client: DaemonClient) -> None:
        """A (re)started daemon holds no slots and no live sequence."""
        self._client = client
        self._entries.clear()
        self._stale_slots.clear()
        # A new set: a request still unwinding on the old daemon releases into the old one.
        self._reserved = set()
        self._lanes.clear()
        self.stats.ram_bytes = 0
        state_id = client.ready.fields.get("state_id") if client.ready else None
        self._disk = None
        if self.settings.disk_dir is not None and state_id:
            self._disk = SnapshotDir(self.settings.disk_dir / f"{self.model}-{state_id}",
                                     self.settings.disk_bytes)
            self.stats.disk_bytes = self._disk.usage()

    async def run_disk_writer(self) -> None:
        """Write pinned snapshots to disk, one at a time, between requests (run in the
        server's nursery)."""
        async for client, entry in self._saves_recv:
            try:
                disk = self._disk
                if disk is None or self._entries.get(entry.slot) is not entry:
                    continue
                path = disk.path_of(entry.tokens)
                if not path.exists():
                    await client.save_slot(entry.slot, path)
                    self.stats.disk_writes += 1
                    self.stats.disk_bytes, removed = disk.trim()
                    self.stats.evictions_disk += removed
            except (DaemonDiedError, DaemonReplyError, OSError) as exc:
                log.warning("model %s: could not write a prefix snapshot to disk: %s",
                            self.model, exc)
            finally:
                entry.pinned = False

    # --- per request -----------------------------------------------------------------

    def sequence(self, client: DaemonClient,
                 prompt: Sequence[int]) -> AbstractAsyncContextManager[int | None]:
        """Hold the daemon sequence a generation of ``prompt`` runs on, for the block:
        on a ``--parallel`` daemon the free one that holds the most of its conversation
        (``Lanes.choose``), to pass as ``generate``'s ``seq`` and to this cache's calls;
        None on a one-sequence daemon."""
        if not self.enabled or not isinstance(client, SlotClient):
            return nullcontext(None)
        if client is not self._client:
            self.daemon_started(client)
        wanted = token_bytes(prompt)
        return client.sequence(lambda free: self._lanes.choose(free, wanted))

    async def before_generate(self, client: DaemonClient, prompt: Sequence[int],
                              marks: Sequence[int], seq: int | None = None
                              ) -> tuple[int, int] | None:
        """``prepare``'s ``snap``, for a daemon that shares in its pool (and tests)."""
        return (await self.prepare(client, prompt, marks, seq)).snap

    async def prepare(self, client: DaemonClient, prompt: Sequence[int],
                      marks: Sequence[int], seq: int | None = None) -> CachePlan:
        """Get the daemon ready to reuse what it can of ``prompt`` on sequence ``seq``
        (held with ``sequence``; None on a one-sequence daemon); says how to run it."""
        if not self.enabled:
            return CachePlan(None, None, reuse=False, keep=False)
        if client is not self._client:
            self.daemon_started(client)
        split = kv_split(client)
        await self._free_stale(client)
        wanted = token_bytes(prompt)
        lane = self._lanes[seq or 0]
        if lane.tokens and not lane.continued_by(wanted):
            # This request is another conversation (it leaves the one this sequence
            # holds before that one's prompt ended): keep that one first. A request that
            # goes on from the last prompt, whatever it makes of the reply, is the same
            # conversation, and the daemon's own checkpoints serve it.
            await self._save_live(client, seq)
        # What the daemon can reuse without a snap: its sequences (this one's own, and
        # the others' through 9.7) and the slots; with one KV stream per sequence, which
        # runs with reuse=0, the slots alone.
        held = max(0 if split else self._lanes.longest_common(wanted), self._held(wanted))
        lane.hold(wanted, len(prompt))  # the daemon holds (a prefix of) it from now on
        await self._load_from_disk(client, wanted, marks, held)
        restore = self._longest(wanted) if split else None
        if restore is not None:
            restore.last_used = time.monotonic()  # LRU: not the next to go
        first = marks[0] if marks else 0
        shared = wanted[: first * 4]
        snap = None
        # A snap caps what the daemon reuses at its position: ask only where nothing
        # held reaches past it.
        if (first >= MIN_SNAPSHOT_TOKENS and first > max(held, self._held(wanted))
                and not self._has(shared)):
            async with self._claim_slot(client) as snap_slot:
                if snap_slot is not None:
                    self._entries[snap_slot] = _Entry(snap_slot, shared, pending=True)
                    snap = first, snap_slot
        return CachePlan(snap, None if restore is None else restore.slot, reuse=not split,
                         keep=split and seq is not None)

    async def keep_sequence(self, client: DaemonClient, seq: int | None) -> None:
        """After a generation that ``prepare`` said to ``keep`` (still holding ``seq``):
        snapshot what the sequence holds, so the conversation's next turn restores it."""
        if self.enabled and client is self._client:
            # RAM only: the disk is searched at a prompt's marks and its whole length,
            # and a turn's state (its prompt and reply) is neither of a later prompt.
            await self._save_live(client, seq, to_disk=False)

    async def before_live_cleared(self, client: DaemonClient) -> None:
        """The daemon is about to clear its sequences (``embed``, PROTOCOL.md 5.11, 9.3):
        keep the conversations they hold in slots, as before another conversation, then
        forget them, so nothing here counts on state the daemon no longer has. (A
        sequence still generating refuses its snapshot, ``seq_busy``: it is skipped.)"""
        if not self.enabled:
            return
        if client is not self._client:
            self.daemon_started(client)
        parallel = isinstance(client, SlotClient)
        for seq in list(self._lanes):
            await self._save_live(client, seq if parallel else None)
        self._lanes.clear()

    def after_generate(self, prompt: Sequence[int], generated: Sequence[int],
                       summary: GenerateSummary | None, snap: tuple[int, int] | None,
                       seq: int | None = None) -> None:
        """Book what the generation on ``seq`` left: what the sequence holds, a snapshot
        it took, the slot it reused. ``summary`` is None when the generation did not
        finish cleanly."""
        if not self.enabled:
            return
        self._lanes[seq or 0].hold(token_bytes([*prompt, *generated]), len(prompt))
        if snap is not None:
            entry = self._entries.get(snap[1])
            # Ours, not a slot of a daemon started since under the same number.
            if (entry is not None and entry.pending
                    and entry.tokens == token_bytes(prompt[: snap[0]])):
                entry.pending = False
                if summary is None or summary.snap_slot != snap[1]:
                    # Not taken (the daemon reused past it), or unknown (cancelled): free it.
                    del self._entries[snap[1]]
                    if summary is None:
                        self._stale_slots.add(snap[1])
        if summary is None:
            return
        reused = summary.prompt_tokens_reused
        if reused > 0:
            self.stats.hits += 1
            self.stats.tokens_reused += reused
        else:
            self.stats.misses += 1
        if summary.cache_slot is not None and summary.cache_slot in self._entries:
            self._entries[summary.cache_slot].last_used = time.monotonic()

    async def settle(self, client: DaemonClient) -> None:
        """After a generation: learn the sizes of new slots, keep the budget, queue disk
        writes."""
        if not self.enabled:
            return
        unsized = [e for e in self._entries.values() if e.host_bytes == 0 and not e.pending]
        if unsized:
            listing = await client.list_slots()
            # Another request may have booked or evicted meanwhile: read the index now.
            unsized = [e for e in unsized if self._entries.get(e.slot) is e and e.host_bytes == 0]
            known = sum(e.host_bytes for e in self._entries.values())
            for entry in unsized:
                if entry.slot not in listing.slots:
                    del self._entries[entry.slot]
            unsized = [e for e in unsized if self._entries.get(e.slot) is e]
            if unsized:
                # list_slots gives the total; the new ones share what the known ones leave.
                share = max(1, (listing.host_bytes - known) // len(unsized))
                for entry in unsized:
                    entry.host_bytes = share
                    self._queue_disk_write(client, entry)
        await self._keep_budget(client)

    # --- internals -------------------------------------------------------------------

    def _longest(self, wanted: bytes) -> _Entry | None:
        """The filled slot holding the longest prefix of ``wanted``."""
        return max((e for e in self._entries.values()
                    if not e.pending and e.host_bytes and wanted.startswith(e.tokens)),
                   key=lambda e: e.n_tokens, default=None)

    def _held(self, wanted: bytes) -> int:
        """The most tokens of ``wanted`` one slot holds."""
        return max((e.n_tokens for e in self._entries.values() if wanted.startswith(e.tokens)),
                   default=0)

    def _has(self, tokens: bytes) -> bool:
        return any(e.tokens == tokens for e in self._entries.values())

    async def _free_stale(self, client: DaemonClient) -> None:
        stale = sorted(self._stale_slots)
        self._stale_slots.clear()
        for slot in stale:
            self._reserved.add(slot)
            try:
                await self._free(client, slot)
            finally:
                self._reserved.discard(slot)

    async def _save_live(self, client: DaemonClient, seq: int | None, *,
                         to_disk: bool = True) -> None:
        """Snapshot what sequence ``seq`` holds into a slot, unless a slot has it."""
        lane = self._lanes[seq or 0]
        live = lane.tokens
        if lane.saved or len(live) // 4 < MIN_SNAPSHOT_TOKENS:
            return
        lane.saved = True
        if any(live.startswith(e.tokens) and e.n_tokens >= len(live) // 4 - 1
               for e in self._entries.values()):
            return
        async with self._claim_slot(client) as slot:
            if slot is None:
                return
            try:
                info = await _snapshot(client, slot, seq)
            except DaemonReplyError as exc:
                # empty_sequence: the daemon dropped an idle sequence's state to make room
                # (PROTOCOL.md 9.6); seq_busy: it generates again. Nothing to keep.
                log.debug("model %s: sequence %s not saved: %s", self.model, seq, exc)
                return
            if info.n_tokens * 4 > len(live):
                # A cancelled generation decoded tokens we never saw: the snapshot's tokens
                # are unknown here, so it cannot be indexed.
                await self._free(client, slot)
                return
            entry = _Entry(slot, live[: info.n_tokens * 4], host_bytes=info.host_bytes)
            self._entries[slot] = entry
            self.stats.ram_bytes += info.host_bytes
            if to_disk:
                self._queue_disk_write(client, entry)

    async def _load_from_disk(self, client: DaemonClient, wanted: bytes, marks: Sequence[int],
                              best: int) -> None:
        if self._disk is None:
            return
        # Where snapshots are taken: the marks and whole prompts (a prefix ending
        # elsewhere is never written, nor looked for).
        ends = [m for m in [*marks, len(wanted) // 4] if m > best and m >= MIN_SNAPSHOT_TOKENS]
        found = self._disk.find(wanted, ends)
        if found is None:
            return
        mark, path = found
        async with self._claim_slot(client) as slot:
            if slot is None:
                return
            try:
                info = await client.load_slot(slot, path)
            except DaemonReplyError as exc:
                self.stats.disk_rejected += 1
                log.warning("model %s: prefix cache file rejected and removed: %s", self.model,
                            exc.detail)
                path.unlink(missing_ok=True)
                return
            SnapshotDir.touch(path)
            self.stats.disk_loads += 1
            self._entries[slot] = _Entry(slot, wanted[: mark * 4], host_bytes=info.host_bytes)
            self.stats.ram_bytes += info.host_bytes

    @asynccontextmanager
    async def _claim_slot(self, client: DaemonClient) -> AsyncIterator[int | None]:
        """A slot to fill, reserved for the block (an empty one, else the least recently
        used entry's, evicted); None when every slot is pinned, pending or reserved. The
        block books the slot in ``_entries`` (or leaves it free) before it ends."""
        reserved = self._reserved
        slot = next((s for s in range(self.n_slots) if s not in self._entries
                     and s not in self._stale_slots and s not in reserved), None)
        if slot is not None:
            reserved.add(slot)
        else:
            victim = self._lru()
            if victim is None:
                yield None
                return
            slot = victim.slot
            reserved.add(slot)
            try:
                await self._evict(client, victim)
            except BaseException:
                reserved.discard(slot)
                raise
        try:
            yield slot
        finally:
            reserved.discard(slot)

    def _lru(self) -> _Entry | None:
        candidates = [e for e in self._entries.values()
                      if not e.pinned and not e.pending and e.slot not in self._reserved]
        return min(candidates, key=lambda e: e.last_used, default=None)

    async def _evict(self, client: DaemonClient, entry: _Entry) -> None:
        del self._entries[entry.slot]
        self.stats.ram_bytes -= entry.host_bytes
        self.stats.evictions_ram += 1
        await self._free(client, entry.slot)

    async def _free(self, client: DaemonClient, slot: int) -> None:
        try:
            await client.free_snapshot(slot)
        except DaemonReplyError as exc:
            if exc.code != "empty_slot":
                raise

    async def _keep_budget(self, client: DaemonClient) -> None:
        self.stats.ram_bytes = sum(e.host_bytes for e in self._entries.values())
        while self.stats.ram_bytes > self.settings.ram_bytes:
            victim = self._lru()
            if victim is None:
                break
            await self._evict(client, victim)

    def _queue_disk_write(self, client: DaemonClient, entry: _Entry) -> None:
        if self._disk is None:
            return
        entry.pinned = True
        self._saves_send.send_nowait((client, entry))


async def _snapshot(client: DaemonClient, slot: int, seq: int | None) -> SnapshotInfo:
    """``snapshot <slot>``, of sequence ``seq`` on a ``--parallel`` daemon."""
    if isinstance(client, SlotClient):
        return await client.snapshot_sequence(slot, seq or 0)
    return await client.snapshot(slot)
