"""Supervision of one daemon: start it, restart it when it dies, say why.

A ``Supervisor`` runs as a task in the server's nursery and owns one daemon
through ``open_daemon``. Logs, /health, /status and /metrics all read the same
record, which tells three endings apart:

- a crash: the daemon was ready, then exited on its own or was killed by a signal.
  It is restarted at once the first time, then with exponential backoff (capped).
  A daemon that made progress before it died (it wrote tokens to its stream after it
  came up ready) or stayed up for ``healthy_after_s`` was no crash loop: its crash
  starts a new streak, so it is restarted at once. Under an OOM killer that takes a
  serving daemon every second or two, restarts stay immediate and the server stays up;
  only a daemon that cannot load, or dies before it serves anything, builds a streak.
- a failed load: it never became ready (bad model, out of memory). Retried with the
  same backoff, since out-of-memory can pass when another process exits.
- an intentional stop: we stopped it (shutdown); never restarted.
- an unload: we stopped it while it was idle (``stop``, models on demand); its state
  is ``unloaded`` and the next ``start`` (a request's ``wait_ready``) brings it back.
- an unreachable host: a daemon on another host (``[[hosts]]``) whose launcher could
  not reach it (``HostUnreachableError``). That is no failure of the daemon: it builds
  no streak and never takes the server down. The state is ``unreachable``, requests get
  a 503 at once instead of waiting, and the start is tried again every
  ``host_retry_s`` until the host answers.

After ``max_failures`` consecutive failures without progress in between the
supervisor gives up: its state becomes ``failed`` and ``run`` raises
``DaemonUnrecoverableError``, which makes the server exit non-zero so systemd's
``Restart=`` can take over. A daemon that was started on demand (``on_demand``, or
after an unload) does not take the server down that way: its state goes back to
``unloaded`` with the reason, the requests waiting for it get a 503 that says it, and
the next request tries again.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from daemons.client import DaemonClient, describe_exit
from daemons.errors import DaemonError, DaemonStartError, HostUnreachableError
from daemons.roles import DaemonLaunch
from orchestrator.errors import DaemonUnrecoverableError, ServiceUnavailableError
from orchestrator.slots import open_model_daemon

__all__ = ["DaemonState", "RestartPolicy", "Supervisor"]

log = logging.getLogger("lucerna.supervisor")


class DaemonState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"  # it crashed or failed to load; waiting out the backoff
    FAILED = "failed"  # gave up: too many failures in a row
    STOPPED = "stopped"
    UNLOADED = "unloaded"  # not started (load on demand), or stopped while idle
    UNREACHABLE = "unreachable"  # its host does not answer; tried again until it does


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 0.0  # the first restart is immediate: resumed requests wait on it
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_failures: int = 5
    healthy_after_s: float = 60.0

    def delay(self, failures: int) -> float:
        """Backoff before restart number ``failures`` (1-based) of a failure streak."""
        if failures <= 1:
            return self.first_delay_s
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (failures - 2)))


class Supervisor:
    def __init__(
        self,
        name: str,
        launch: DaemonLaunch,
        *,
        policy: RestartPolicy | None = None,
        on_ready: Callable[[DaemonClient], Awaitable[None]] | None = None,
        on_demand: bool = False,
        needs: tuple[Supervisor, ...] = (),
    ) -> None:
        self.name = name
        self.launch = launch
        self.policy = policy or RestartPolicy()
        self.state = DaemonState.STARTING
        self.client: DaemonClient | None = None
        self.detail = "starting"
        self.pid: int | None = None
        self.started_at: float | None = None
        self.starts = 0
        self.crashes = 0
        self.failed_loads = 0
        self.last_exit: str | None = None
        self._streak = 0
        self._changed = trio.Event()
        self._on_ready = on_ready
        self.on_demand = on_demand
        self.needs = needs
        """Daemons this one uses (ds4 shards over ggml RPC): each start waits for them."""
        self.unloads = 0
        self.wake_failures = 0  # starts on demand that gave up (see wait_ready)
        self._start_wanted = not on_demand
        self._start_requested = trio.Event()
        # Cancelled by ``stop``: the wait on a running daemon, or a restart's backoff.
        self._stop_scope: trio.CancelScope | None = None
        self._unloaded_detail = "not loaded yet (load = on_demand)"
        self.unreachable_starts = 0  # starts that found the host unreachable
        self._unreachable = False

    @property
    def host_retry_s(self) -> float:
        """Seconds between tries to reach an unreachable host: its link timeout, 1 s at least."""
        return max(1.0, self.launch.link_timeout_s or self.policy.max_delay_s)

    def start(self) -> None:
        """Have the daemon started if it is unloaded (or being unloaded); idempotent."""
        if not self._start_wanted:
            self._start_wanted = True
            self._start_requested.set()
            self._start_requested = trio.Event()

    async def stop(self) -> None:
        """Stop the daemon on purpose and return once it is gone; ``start`` brings it back."""
        self._start_wanted = False
        if self._stop_scope is not None:
            self._stop_scope.cancel()
        while self.state not in (DaemonState.UNLOADED, DaemonState.FAILED,
                                 DaemonState.STOPPED) and not self._start_wanted:
            await self._changed.wait()

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def _set(self, state: DaemonState, detail: str) -> None:
        self.state = state
        self.detail = detail
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the daemon running until cancelled; raise once it cannot be brought back."""
        task_status.started()
        try:
            while True:
                if not self._start_wanted:
                    self._set(DaemonState.UNLOADED, self._unloaded_detail)
                    await self._start_requested.wait()
                if await self._run_once():
                    self.unloads += 1
                    self._unloaded_detail = "unloaded"
                    continue
                if self._unreachable:
                    self._set(DaemonState.UNREACHABLE, f"{self.last_exit}; trying again every "
                              f"{self.host_retry_s:g} s")
                    with trio.CancelScope() as self._stop_scope:
                        await trio.sleep(self.host_retry_s)
                    self._stop_scope = None
                    continue
                if self._streak >= self.policy.max_failures and (
                        self.on_demand or self.unloads):
                    # A wake that failed: say why to those waiting, keep the server up.
                    message = (f"could not be loaded ({self._streak} tries): "
                               f"{self.last_exit}")
                    log.error("model %s: %s", self.name, message)
                    self.wake_failures += 1
                    self._streak = 0
                    self._start_wanted = False
                    self._unloaded_detail = message
                    continue
                if self._streak >= self.policy.max_failures:
                    message = (f"gave up after {self._streak} failures in a row; "
                               f"last: {self.last_exit}")
                    log.critical("model %s: %s", self.name, message)
                    self._set(DaemonState.FAILED, message)
                    raise DaemonUnrecoverableError(f"model {self.name!r}: {message}")
                delay = self.policy.delay(self._streak)
                log.warning("model %s: restarting its daemon in %.1f s (failure %d of at most "
                            "%d in a row)", self.name, delay, self._streak,
                            self.policy.max_failures)
                self._set(DaemonState.RESTARTING, f"restart in {delay:.1f} s after: "
                          f"{self.last_exit}")
                with trio.CancelScope() as self._stop_scope:
                    await trio.sleep(delay)
                self._stop_scope = None
        finally:
            self.client = None
            if self.state is not DaemonState.FAILED:
                self._set(DaemonState.STOPPED, "stopped")

    async def _run_once(self) -> bool:
        """One daemon's life; True when ``stop`` ended it (an unload, not a failure)."""
        self.starts += 1
        self._unreachable = False
        if self.starts > 1 and self.state is not DaemonState.UNREACHABLE:
            self._set(DaemonState.STARTING, f"restart {self.starts - 1}")
        try:
            for needed in self.needs:
                try:
                    await needed.wait_ready(self.host_retry_s)
                except ServiceUnavailableError as exc:
                    # Like an unreachable host: no fault of this daemon; tried again.
                    self._unreachable = True
                    self.last_exit = f"waiting for {needed.name}: {exc}"
                    return False
            async with open_model_daemon(self.launch) as client:
                if self._on_ready is not None:
                    await self._on_ready(client)
                self.client = client
                self.pid = client.pid
                self.started_at = time.monotonic()
                streamed_at_ready = client.stream_bytes
                self._set(DaemonState.READY, f"pid {client.pid}")
                if self.starts > 1:
                    log.warning("model %s: daemon restarted (restart %d), pid %d", self.name,
                                self.restarts, client.pid)
                with trio.CancelScope() as self._stop_scope:
                    if not self._start_wanted:  # stop() came while it was starting
                        self._stop_scope.cancel()
                    await client.exited.wait()
                self._stop_scope = None
                if not client.exited.is_set():  # stop(): leaving the block quits it
                    self.client = None
                    self._set(DaemonState.STARTING, "unloading")
                    self._streak = 0
                    return True
                # Reached only when the daemon exited without being asked to.
                self.client = None
                up_s = time.monotonic() - self.started_at
                served = client.stream_bytes > streamed_at_ready
                if served or up_s >= self.policy.healthy_after_s:
                    self._streak = 0  # it made progress: not a crash loop
                self._streak += 1
                self.crashes += 1
                self.last_exit = f"daemon pid {client.pid} {describe_exit(client.returncode)}"
                if client.link_lost:
                    self.last_exit = f"{client.link_lost}: {self.last_exit}"
                tail = list(client.stderr_tail)[-3:]
                if tail:
                    self.last_exit += f"; last stderr: {' | '.join(tail)}"
                log.error("model %s: crash: %s after %.1f s up%s", self.name, self.last_exit,
                          up_s, "" if served else ", before it served anything")
        except HostUnreachableError as exc:
            self.client = None
            self._unreachable = True
            self.unreachable_starts += 1
            self.last_exit = str(exc).splitlines()[0]
            log.error("model %s: %s", self.name, self.last_exit)
        except DaemonStartError as exc:
            self.client = None
            self._streak += 1
            self.failed_loads += 1
            self.last_exit = f"failed to load: {exc}"
            log.error("model %s: daemon failed to load: %s", self.name, exc)
        except DaemonError as exc:
            # Died while we were still talking to it during on_ready.
            self.client = None
            self._streak += 1
            self.crashes += 1
            self.last_exit = str(exc)
            log.error("model %s: daemon died while starting: %s", self.name, exc)
        return False

    async def wait_ready(self, timeout_s: float | None = None) -> DaemonClient:
        """The ready daemon, waiting through a start or restart; 503 if it won't come.

        An unloaded daemon is started (models on demand); if that start gives up, the
        503 says why."""
        failures = self.wake_failures
        with trio.move_on_after(timeout_s if timeout_s is not None else float("inf")):
            while True:
                client = self.client
                if (self.state is DaemonState.READY and client is not None
                        and not client.exited.is_set()):
                    return client
                if self.state in (DaemonState.FAILED, DaemonState.STOPPED,
                                  DaemonState.UNREACHABLE):
                    break
                if self.wake_failures != failures:
                    break
                self.start()
                await self._changed.wait()
        raise ServiceUnavailableError(self.unavailable_message())

    def unavailable_message(self) -> str:
        return f"model {self.name!r} is not available: daemon {self.state.value} ({self.detail})"

    def ready_client(self) -> DaemonClient:
        client = self.client
        if self.state is not DaemonState.READY or client is None or client.exited.is_set():
            raise ServiceUnavailableError(self.unavailable_message())
        return client
