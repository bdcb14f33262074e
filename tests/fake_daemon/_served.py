"""A ``ServedModel`` on fake daemons, served as orchestrator/server.py serves one.

``served_model`` builds the model the way orchestrator/config builds one (its prefix
cache sized by the launch's slots); ``serving`` runs its supervisor (and the cache's disk
writer) in a nursery for the block, as ``orchestrator.server._serve`` does, and waits
until it is ready unless told not to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from daemons.gguf_info import GGUFInfo
from daemons.roles import DEFAULT_SLOTS, DaemonLaunch
from orchestrator.models import ServedModel
from orchestrator.prefix_cache import CacheSettings, PrefixCache
from orchestrator.supervisor import RestartPolicy

from ._seam import fake_launch

__all__ = ["served_model", "serving"]


def served_model(name: str = "fake", *, launch: DaemonLaunch | None = None,
                 cache: CacheSettings | None = None, policy: RestartPolicy | None = None,
                 chat_template: str | None = None, max_output_tokens: int | None = None,
                 **launch_fields: Any) -> ServedModel:
    """A model on a fake launch (``launch_fields`` go to ``fake_launch``)."""
    launch = launch or fake_launch(**launch_fields)
    info = GGUFInfo(path=Path(launch.model), architecture="qwen3", name=name,
                    context_length=None, chat_template=chat_template, size_bytes=0)
    return ServedModel(
        name, info, launch, max_output_tokens=max_output_tokens,
        restart_policy=policy or RestartPolicy(),
        prefix_cache=None if cache is None
        else PrefixCache(name, cache, launch.slots or DEFAULT_SLOTS))


@asynccontextmanager
async def serving(model: ServedModel, *, wait: bool = True) -> AsyncIterator[ServedModel]:
    """Supervise ``model``'s daemon for the block (ready first, with ``wait``)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(model.supervisor.run)
        if model.prefix_cache is not None:
            nursery.start_soon(model.prefix_cache.run_disk_writer)
        if wait and not model.supervisor.on_demand:
            await model.supervisor.wait_ready()
        try:
            yield model
        finally:
            nursery.cancel_scope.cancel()
