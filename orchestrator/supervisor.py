"""Supervision of one daemon: start it, know its state, notice its death.

A ``Supervisor`` runs as a task in the server's nursery. It owns the daemon
through ``open_daemon`` and records what happened to it, so /health, logs and
requests all see the same truth. It tells three endings apart:

- ``failed``: the daemon never became ready (bad model, load failure);
- ``died``: it was ready and then exited on its own or was killed by a signal;
- ``stopped``: we stopped it (server shutdown).

Restarting a dead daemon is deliberately not done here yet: the restart policy
(backoff, retry and resume of in-flight requests) is its own piece of work. Until
then a dead daemon stays dead, visibly, and requests get a clean 503.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable

import trio

from daemons.client import DaemonClient, describe_exit, open_daemon
from daemons.errors import DaemonError
from daemons.roles import DaemonLaunch
from orchestrator.errors import ServiceUnavailableError

__all__ = ["DaemonState", "Supervisor"]

log = logging.getLogger("lucerna.supervisor")


class DaemonState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    DIED = "died"
    STOPPED = "stopped"


class Supervisor:
    def __init__(self, name: str, launch: DaemonLaunch,
                 on_ready: Callable[[DaemonClient], Awaitable[None]] | None = None) -> None:
        self.name = name
        self.launch = launch
        self.state = DaemonState.STARTING
        self.client: DaemonClient | None = None
        self.detail = "starting"
        self.pid: int | None = None
        self.started_at: float | None = None
        self.state_changed = trio.Event()
        self._on_ready = on_ready

    def _set(self, state: DaemonState, detail: str) -> None:
        self.state = state
        self.detail = detail
        self.state_changed.set()
        self.state_changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the daemon and hold it until it dies or we are cancelled."""
        task_status.started()
        try:
            async with open_daemon(self.launch) as client:
                self.client = client
                self.pid = client.pid
                self.started_at = time.time()
                if self._on_ready is not None:
                    await self._on_ready(client)
                self._set(DaemonState.READY, f"pid {client.pid}")
                await client.exited.wait()
                # Reached only when the daemon exited without being asked to.
                self.client = None
                message = f"daemon pid {client.pid} {describe_exit(client.returncode)}"
                tail = list(client.stderr_tail)[-3:]
                if tail:
                    message += f"; last stderr: {' | '.join(tail)}"
                log.error("model %s: %s", self.name, message)
                self._set(DaemonState.DIED, message)
        except DaemonError as exc:
            self.client = None
            log.error("model %s: daemon failed to start: %s", self.name, exc)
            self._set(DaemonState.FAILED, str(exc))
        finally:
            if self.state in (DaemonState.READY, DaemonState.STARTING):
                self.client = None
                self._set(DaemonState.STOPPED, "stopped")

    async def wait_ready(self) -> None:
        while self.state is DaemonState.STARTING:
            await self.state_changed.wait()
        if self.state is not DaemonState.READY:
            raise ServiceUnavailableError(self.unavailable_message())

    def unavailable_message(self) -> str:
        return f"model {self.name!r} is not available: daemon {self.state.value} ({self.detail})"

    def ready_client(self) -> DaemonClient:
        client = self.client
        if self.state is not DaemonState.READY or client is None or client.exited.is_set():
            raise ServiceUnavailableError(self.unavailable_message())
        return client
