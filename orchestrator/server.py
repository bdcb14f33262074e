"""Run the HTTP server and the daemons' supervisors under one Trio nursery."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from orchestrator.app import build_app
from orchestrator.errors import DaemonUnrecoverableError
from orchestrator.models import ModelRegistry, ServedModel

__all__ = ["ServerOptions", "run_server", "wait_for_signal"]

log = logging.getLogger("lucerna.server")


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    # Hypercorn's default of 3 s cuts long SSE streams at shutdown; give them time.
    shutdown_timeout: float = 30.0


async def wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            return


async def run_server(
    models: list[ServedModel],
    options: ServerOptions,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] = wait_for_signal,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown_trigger`` returns; reports the bound URLs via task_status."""
    registry = ModelRegistry(models)
    config = HypercornConfig()
    config.bind = [f"{options.host}:{options.port}"]
    config.graceful_timeout = options.shutdown_timeout
    config.accesslog = logging.getLogger("lucerna.access")
    config.errorlog = logging.getLogger("lucerna.http")
    try:
        await _serve(registry, config, shutdown_trigger, task_status)
    except* DaemonUnrecoverableError as group:
        # One model's daemon cannot be brought back: stop serving and say which, so
        # the process exits non-zero and systemd's Restart= can take over.
        raise group.exceptions[0] from None


async def _serve(
    registry: ModelRegistry,
    config: HypercornConfig,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]],
) -> None:
    async with trio.open_nursery() as nursery:
        for model in registry:
            nursery.start_soon(model.supervisor.run)

        async def serve_then_stop(task_status: trio.TaskStatus[list[str]]) -> None:
            app: Any = build_app(registry)  # hypercorn types ASGI apps narrower than starlette
            await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger,
                                  task_status=task_status)
            # Requests are drained; now the supervisors quit their daemons.
            nursery.cancel_scope.cancel()

        binds = await nursery.start(serve_then_stop)
        log.info("listening on %s", ", ".join(binds))
        task_status.started(binds)
        for model in registry:
            try:
                await model.supervisor.wait_ready()
                log.info("model %s ready on %s", model.name, ", ".join(binds))
            except Exception as exc:  # logged here; /health reports it
                log.error("model %s is not available: %s", model.name, exc)
