"""Run the HTTP server and the daemons' supervisors under one Trio nursery.

Shutdown, in order: the trigger fires (SIGTERM or SIGINT); systemd hears
``STOPPING=1``; hypercorn closes its listeners (new connections are refused) and
gives in-flight requests up to ``shutdown_timeout`` seconds to finish, then cancels
what is left; only then are the supervisors cancelled, which quit their daemons
(``quit``, then SIGTERM and SIGKILL on each daemon's process group).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from orchestrator.app import build_app
from orchestrator.config import ServerSettings
from orchestrator.errors import DaemonUnrecoverableError
from orchestrator.models import ModelRegistry, ServedModel
from orchestrator.systemd import SystemdEnvironment, report_status, run_watchdog

__all__ = ["ServerOptions", "run_server", "wait_for_signal"]

log = logging.getLogger("lucerna.server")


# The name run_server's settings had before the config file; they are its [server] table.
ServerOptions = ServerSettings


async def wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            return


async def run_server(
    models: list[ServedModel],
    options: ServerSettings,
    *,
    systemd: SystemdEnvironment | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] = wait_for_signal,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown_trigger`` returns; reports the bound URLs via task_status.

    ``systemd`` (see ``SystemdEnvironment.take``) adds readiness and watchdog
    notifications, and replaces ``host``/``port`` by sockets systemd passed us.
    """
    registry = ModelRegistry(models, default=options.default_model,
                             group_memory_mib=options.group_memory_mib)
    systemd = systemd or SystemdEnvironment()
    config = HypercornConfig()
    if systemd.listen_fds:
        config.bind = [f"fd://{fd}" for fd in systemd.listen_fds]
    else:
        host = f"[{options.host}]" if ":" in options.host else options.host
        config.bind = [f"{host}:{options.port}"]
    # Hypercorn's default of 3 s cuts long SSE streams at shutdown; give them time.
    config.graceful_timeout = options.shutdown_timeout
    config.accesslog = logging.getLogger("lucerna.access")
    config.errorlog = logging.getLogger("lucerna.http")
    try:
        await _serve(registry, options, config, systemd, shutdown_trigger, task_status)
    except* DaemonUnrecoverableError as group:
        # One model's daemon cannot be brought back: stop serving and say which, so
        # the process exits non-zero and systemd's Restart= can take over.
        systemd.notify("STOPPING=1", f"STATUS=failed: {group.exceptions[0]}")
        raise group.exceptions[0] from None


async def _serve(
    registry: ModelRegistry,
    options: ServerSettings,
    config: HypercornConfig,
    systemd: SystemdEnvironment,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]],
) -> None:
    async with trio.open_nursery() as nursery:
        shards = {id(shard): shard for model in registry for shard in model.shards}
        for shard in shards.values():  # ds4 shards, before the targets that wait for them
            nursery.start_soon(shard.run)
        for model in registry:
            nursery.start_soon(model.supervisor.run)
            if model.prefill is not None:  # PFlash: its drafter daemon (orchestrator/prefill)
                nursery.start_soon(model.prefill.run)
            if model.prefix_cache is not None:  # its disk tier's writer
                nursery.start_soon(model.prefix_cache.run_disk_writer)
        nursery.start_soon(registry.residency.run)  # parks or stops idle models
        status_scope = trio.CancelScope()

        async def stop_when_triggered() -> None:
            await shutdown_trigger()
            status_scope.cancel()  # no READY=1 or stale STATUS= after STOPPING=1
            systemd.notify("STOPPING=1", "STATUS=draining in-flight requests (up to "
                           f"{options.shutdown_timeout:g} s)")

        async def serve_then_stop(task_status: trio.TaskStatus[list[str]]) -> None:
            # hypercorn types ASGI apps narrower than starlette
            app: Any = build_app(registry, options)
            await hypercorn_serve(app, config, shutdown_trigger=stop_when_triggered,
                                  task_status=task_status)
            # Requests are drained; now the supervisors quit their daemons.
            nursery.cancel_scope.cancel()

        async def report() -> None:
            with status_scope:
                await report_status(systemd, registry, binds)

        binds = await nursery.start(serve_then_stop)
        log.info("listening on %s%s", ", ".join(binds),
                 " (sockets from systemd)" if systemd.listen_fds else "")
        nursery.start_soon(run_watchdog, systemd)
        if systemd.notify_socket:
            nursery.start_soon(report)
        task_status.started(binds)
        for model in registry:
            if model.supervisor.on_demand:  # its first request starts it
                log.info("model %s: loaded on demand", model.name)
                continue
            try:
                await model.supervisor.wait_ready()
                log.info("model %s ready on %s", model.name, ", ".join(binds))
            except Exception as exc:  # logged here; /health reports it
                log.error("model %s is not available: %s", model.name, exc)
