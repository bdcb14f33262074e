"""systemd integration without a dependency: readiness, watchdog, socket activation.

- ``sd_notify``: one datagram per message to ``$NOTIFY_SOCKET`` (a filesystem path,
  or ``@name`` for the abstract namespace), as sd_notify(3) describes. Sending never
  raises: a service must not die because its supervisor went away.
- ``READY=1`` once the listener is bound *and* every model's daemon is ready (the
  moment ``/health`` turns 200), ``STATUS=`` lines as models load, restart or fail,
  ``STOPPING=1`` when shutdown starts.
- ``WATCHDOG=1`` every ``WATCHDOG_USEC / 2`` from a Trio task, so a wedged event loop
  stops the pings and systemd restarts the service. A daemon that is restarting does
  not stop the pings: the supervisor deals with daemons, the watchdog with us.
- Socket activation (sd_listen_fds(3)): when ``LISTEN_PID`` is our pid, the
  ``LISTEN_FDS`` descriptors from fd 3 on are served (hypercorn's ``fd://N`` binds)
  instead of ``--host``/``--port``.

``SystemdEnvironment.take`` reads these variables *and removes them* from
``os.environ`` (sd_notify's ``unset_environment``), so the daemons we spawn, which
inherit our environment, can neither claim our readiness nor our sockets.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass

import trio

from orchestrator.models import ModelRegistry
from orchestrator.supervisor import DaemonState

__all__ = ["LISTEN_FDS_START", "SystemdEnvironment", "report_status", "run_watchdog", "sd_notify"]

log = logging.getLogger("lucerna.systemd")

LISTEN_FDS_START = 3
_STATUS_POLL_S = 0.1


def sd_notify(address: str | None, *lines: str) -> bool:
    """Send ``lines`` as one notification datagram; False (logged) when it could not be sent."""
    if not address or not lines:
        return False
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto("\n".join(lines).encode(), target)
    except OSError as exc:
        log.warning("could not notify systemd at %s: %s", address, exc)
        return False
    return True


@dataclass(frozen=True)
class SystemdEnvironment:
    """What systemd handed this process; the default means "not run by systemd"."""

    notify_socket: str | None = None
    watchdog_interval_s: float | None = None
    """Half of ``WATCHDOG_USEC``: how often to ping."""
    listen_fds: tuple[int, ...] = ()

    @classmethod
    def take(cls, environ: MutableMapping[str, str] | None = None,
             pid: int | None = None) -> SystemdEnvironment:
        """Read the systemd variables from ``environ`` (``os.environ``) and remove them."""
        env = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        values = {name: env.pop(name, None) for name in (
            "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
            "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")}
        interval = None
        watchdog_pid = values["WATCHDOG_PID"]
        if values["WATCHDOG_USEC"] and (not watchdog_pid or watchdog_pid == str(pid)):
            try:
                usec = int(values["WATCHDOG_USEC"] or "")
            except ValueError:
                usec = 0
            if usec > 0:
                interval = usec / 2 / 1_000_000
        fds: tuple[int, ...] = ()
        if values["LISTEN_PID"] == str(pid):
            try:
                count = int(values["LISTEN_FDS"] or "0")
            except ValueError:
                count = 0
            fds = tuple(range(LISTEN_FDS_START, LISTEN_FDS_START + max(0, count)))
        elif values["LISTEN_FDS"]:
            log.warning("ignoring LISTEN_FDS: LISTEN_PID=%s is not this process (%d)",
                        values["LISTEN_PID"], pid)
        return cls(values["NOTIFY_SOCKET"] or None, interval, fds)

    def notify(self, *lines: str) -> bool:
        return sd_notify(self.notify_socket, *lines)


async def run_watchdog(systemd: SystemdEnvironment) -> None:
    """Ping the watchdog every half ``WATCHDOG_USEC`` while the event loop runs."""
    if systemd.watchdog_interval_s is None or not systemd.notify_socket:
        return
    while True:
        systemd.notify("WATCHDOG=1")
        await trio.sleep(systemd.watchdog_interval_s)


def status_line(registry: ModelRegistry, binds: list[str]) -> str:
    """One human line for ``systemctl status``: what is loading, failing, or served."""
    models = list(registry)
    ready = [m for m in models if m.supervisor.state is DaemonState.READY]
    troubled = [f"{m.name} {m.supervisor.state.value}" for m in models
                if m.supervisor.state in (DaemonState.RESTARTING, DaemonState.FAILED)]
    if troubled:
        return f"{len(ready)}/{len(models)} models ready; " + "; ".join(troubled)
    if len(ready) < len(models):
        loading = ", ".join(m.name for m in models if m not in ready)
        return f"loading {loading} ({len(ready)}/{len(models)} models ready)"
    return f"serving {', '.join(m.name for m in models)} on {', '.join(binds)}"


async def report_status(systemd: SystemdEnvironment, registry: ModelRegistry,
                        binds: list[str]) -> None:
    """Send ``STATUS=`` on every change and ``READY=1`` the first time all models are ready.

    Polls (every 0.1 s) rather than waiting on each supervisor: a status line is
    cheap, and polling cannot miss a model that changes state between two waits.
    """
    sent_ready = False
    last = ""
    while True:
        line = status_line(registry, binds)
        all_ready = all(m.supervisor.state is DaemonState.READY for m in registry)
        if line != last or (all_ready and not sent_ready):
            messages = [f"STATUS={line}"]
            if all_ready and not sent_ready:
                messages.insert(0, "READY=1")
                sent_ready = True
            systemd.notify(*messages)
            last = line
        await trio.sleep(_STATUS_POLL_S)
