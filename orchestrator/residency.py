"""Models on demand: which models are awake, and parking or stopping the idle ones.

Each model has a ``Residence``: its policy from the config (``load``, ``idle``,
``idle_action``, ``group``) and what is known of it now (parked or not, when it was
last used, how much memory it holds awake). ``Residency`` acts on them:

- ``wake``: a request for a parked model unparks it (PROTOCOL.md 5.6: the weights come
  back, the process, its snapshot slots and its tokenizer never left); a request for an
  unloaded model starts its daemon (``Supervisor.start``) and waits for it. Before
  either, if the model's group has a memory budget (``[server] group_memory_mib``) that
  the wake would exceed, the least recently used idle model of the group is parked
  first, then the next, until it fits (or nothing idle is left: then it wakes anyway and
  says so in the log, since the budget is an estimate).
- idle: a model unused for ``idle`` is parked or stopped (``idle_action``). Parking
  keeps the prefix cache's snapshots in the daemon's slots; stopping loses them, and the
  new daemon's ``PrefixCache.daemon_started`` forgets its index (models.py).

"Idle" means its queue is empty: no request running or waiting (scheduler.py), so a
model is never parked under a request. The memory of an awake model is what its
daemon's ``stats`` reports for its weights (``bytes_host + bytes_device``), measured at
each wake; before its first start, its GGUF's size.

Each wake and park is counted and timed per model (``Residence.counters``, read by
/metrics and /status).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from daemons.errors import DaemonsError
from daemons.gguf_info import GGUFInfo
from orchestrator.errors import ModelBusyError, ServiceUnavailableError
from orchestrator.scheduler import RequestQueue
from orchestrator.supervisor import DaemonState, Supervisor

__all__ = ["Residence", "Residency", "Resident"]

log = logging.getLogger("lucerna.residency")

MIB = 1 << 20
MAX_TICK_S = 5.0
MIN_TICK_S = 0.05


@dataclass
class Residence:
    """One model's residency policy (from its ``[[models]]`` table) and state."""

    load: str = "boot"  # "boot" | "on_demand"
    idle_s: float | None = None
    idle_action: str = "park"  # "park" | "stop"
    group: str = "default"
    parked: bool = False
    last_used: float = field(default_factory=time.monotonic)
    memory_bytes: int = 0
    """Bytes its weights hold awake: the daemon's ``stats`` after its last wake (or its
    first request), else the GGUF's size."""
    measured: bool = False
    lock: trio.Lock = field(default_factory=trio.Lock)
    wakes: Counter[str] = field(default_factory=Counter)
    """Wakes by kind: ``start`` (an unloaded daemon) or ``unpark``."""
    wake_seconds: dict[str, float] = field(default_factory=dict)
    parks: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Parks and stops by (kind, reason): kind ``park`` or ``stop``; reason ``idle``,
    ``lru`` (room for another model's wake) or ``request`` (``POST /models/.../unload``)."""
    park_seconds: dict[str, float] = field(default_factory=dict)
    last_wake_s: float | None = None


class Resident(Protocol):
    """A model as ``Residency`` acts on it: an ``orchestrator.models.ServedModel``. Named
    by what it offers rather than imported, because the model holds its ``Residency``
    (``ServedModel.wake``) and the two modules would import each other."""

    residency: Residency | None

    @property
    def name(self) -> str: ...

    @property
    def info(self) -> GGUFInfo: ...

    @property
    def supervisor(self) -> Supervisor: ...

    @property
    def queue(self) -> RequestQueue: ...

    @property
    def residence(self) -> Residence: ...


class Residency:
    """Wakes, parks and stops the models of one server (see the module docstring)."""

    def __init__(self, models: Sequence[Resident],
                 group_memory_mib: Mapping[str, int] | None = None) -> None:
        self.models = list(models)
        self.budgets = {group: mib * MIB for group, mib in (group_memory_mib or {}).items()}
        for model in self.models:
            model.residency = self
            if not model.residence.memory_bytes:
                model.residence.memory_bytes = model.info.size_bytes

    # --- states ----------------------------------------------------------------------

    @staticmethod
    def state(model: Resident) -> str:
        """``unloaded``, ``starting``, ``ready``, ``parked``, ``restarting``, ``failed``
        or ``stopped``."""
        state = model.supervisor.state
        if state is DaemonState.READY and model.residence.parked:
            return "parked"
        return state.value

    @staticmethod
    def is_awake(model: Resident) -> bool:
        """Holds (or is about to hold) its weights in memory."""
        return (model.supervisor.state in (DaemonState.STARTING, DaemonState.READY,
                                           DaemonState.RESTARTING)
                and not model.residence.parked)

    def status(self, model: Resident) -> dict[str, Any]:
        r = model.residence
        return {
            "state": self.state(model),
            "load": r.load,
            "idle_s": r.idle_s,
            "idle_action": r.idle_action,
            "group": r.group,
            "group_budget_bytes": self.budgets.get(r.group),
            "memory_bytes": r.memory_bytes if self.is_awake(model) else 0,
            "awake_memory_bytes": r.memory_bytes,
            "unused_s": round(time.monotonic() - self._last_used(model), 3),
            "wakes": dict(r.wakes),
            "wake_seconds": {k: round(v, 3) for k, v in r.wake_seconds.items()},
            "last_wake_s": None if r.last_wake_s is None else round(r.last_wake_s, 3),
            "parks": {f"{kind}:{reason}": n for (kind, reason), n in r.parks.items()},
        }

    @staticmethod
    def _last_used(model: Resident) -> float:
        return max(model.residence.last_used, model.queue.idle_since)

    # --- wake ------------------------------------------------------------------------

    async def wake(self, model: Resident) -> None:
        """Make ``model`` ready to generate: start or unpark it (room made first)."""
        r = model.residence
        async with r.lock:
            supervisor = model.supervisor
            woke = supervisor.state is DaemonState.UNLOADED or r.parked
            if supervisor.state is DaemonState.UNLOADED:
                await self._make_room(model)
                started = time.monotonic()
                client = await supervisor.wait_ready()
                self._woke(model, "start", time.monotonic() - started)
            else:
                client = await supervisor.wait_ready()
                if r.parked:
                    await self._make_room(model)
                    started = time.monotonic()
                    try:
                        await client.unpark()
                    except DaemonsError as exc:
                        raise ServiceUnavailableError(
                            f"model {model.name!r} could not be unparked: {exc}") from exc
                    r.parked = False
                    self._woke(model, "unpark", time.monotonic() - started)
            r.last_used = time.monotonic()
            if not woke and r.measured:
                return
            try:
                stats = await client.stats()
                r.memory_bytes = (int(stats.get("bytes_host", 0))
                                  + int(stats.get("bytes_device", 0))) or r.memory_bytes
                r.measured = True
            except (DaemonsError, ValueError) as exc:
                log.warning("model %s: no memory figure from stats: %s", model.name, exc)

    def _woke(self, model: Resident, kind: str, seconds: float) -> None:
        r = model.residence
        r.wakes[kind] += 1
        r.wake_seconds[kind] = r.wake_seconds.get(kind, 0.0) + seconds
        r.last_wake_s = seconds
        log.info("model %s: woke (%s) in %.3f s", model.name, kind, seconds)

    async def _make_room(self, model: Resident) -> None:
        group = model.residence.group
        budget = self.budgets.get(group)
        if budget is None:
            return
        need = model.residence.memory_bytes
        while True:
            awake = [m for m in self.models if m is not model and m.residence.group == group
                     and self.is_awake(m)]
            used = sum(m.residence.memory_bytes for m in awake)
            if used + need <= budget:
                return
            # Idle and not being woken or parked by someone else (whose lock we would
            # otherwise wait on while holding ours).
            idle = [m for m in awake if not m.queue.busy and not m.residence.lock.locked()
                    and m.supervisor.state is DaemonState.READY]
            if not idle:
                log.warning("model %s: waking it exceeds group %r's budget (%d + %d > %d "
                            "bytes) and no model there is idle; waking it anyway", model.name,
                            group, used, need, budget)
                return
            victim = min(idle, key=self._last_used)
            log.info("model %s: parking %s (least recently used) to make room in group %r",
                     model.name, victim.name, group)
            if not await self.park(victim, "lru"):
                log.warning("model %s: %s could not be parked (busy again); waking anyway",
                            model.name, victim.name)
                return

    # --- park and stop ---------------------------------------------------------------

    async def park(self, model: Resident, reason: str) -> bool:
        """Release its weights, keep its process and caches; False if it was not awake."""
        r = model.residence
        async with r.lock:
            client = model.supervisor.client
            if model.supervisor.state is not DaemonState.READY or client is None or r.parked:
                return False
            if reason != "request" and model.queue.busy:  # a request came meanwhile
                return False
            started = time.monotonic()
            try:
                await client.park()
            except DaemonsError as exc:
                log.warning("model %s: park failed: %s", model.name, exc)
                return False
            r.parked = True
            self._parked(model, "park", reason, time.monotonic() - started)
            return True

    async def stop(self, model: Resident, reason: str) -> bool:
        """Stop its daemon (its snapshots go with it); False if it was not running."""
        r = model.residence
        async with r.lock:
            if model.supervisor.state in (DaemonState.UNLOADED, DaemonState.FAILED,
                                          DaemonState.STOPPED):
                return False
            if reason != "request" and model.queue.busy:  # a request came meanwhile
                return False
            started = time.monotonic()
            await model.supervisor.stop()
            r.parked = False
            self._parked(model, "stop", reason, time.monotonic() - started)
            return True

    async def unload(self, model: Resident, action: str, reason: str = "request") -> bool:
        """``POST /models/{name}/unload``: park or stop, refused while it serves."""
        if model.queue.busy:
            raise ModelBusyError(f"model {model.name!r} is serving {model.queue.running} "
                                 f"request(s) ({model.queue.waiting} waiting); retry when "
                                 "it is idle")
        if action == "park":
            return await self.park(model, reason)
        return await self.stop(model, reason)

    def _parked(self, model: Resident, kind: str, reason: str, seconds: float) -> None:
        r = model.residence
        r.parks[(kind, reason)] += 1
        r.park_seconds[kind] = r.park_seconds.get(kind, 0.0) + seconds
        log.info("model %s: %s (%s) in %.3f s", model.name,
                 "parked" if kind == "park" else "stopped", reason, seconds)

    # --- the idle watch --------------------------------------------------------------

    def tick_s(self) -> float | None:
        idles = [m.residence.idle_s for m in self.models if m.residence.idle_s is not None]
        if not idles:
            return None
        return min(MAX_TICK_S, max(MIN_TICK_S, min(idles) / 4))

    async def run(self) -> None:
        """Park or stop the models that were idle for their ``idle``; until cancelled."""
        tick = self.tick_s()
        if tick is None:
            return
        while True:
            await trio.sleep(tick)
            now = time.monotonic()
            for model in self.models:
                r = model.residence
                if (r.idle_s is None or model.queue.busy or r.lock.locked()
                        or now - self._last_used(model) < r.idle_s):
                    continue
                if r.idle_action == "park" and self.is_awake(model):
                    await self.park(model, "idle")
                elif r.idle_action == "stop" and model.supervisor.state is DaemonState.READY:
                    await self.stop(model, "idle")
