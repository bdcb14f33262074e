"""The same generation as the HTTP server's, driven straight over the daemon protocol.

This is the baseline that measures what the HTTP front end costs: per request the
server tokenizes the prompt on the daemon, runs ``generate`` (greedy, the whole
``max_tokens``), detokenizes and streams SSE. ``DaemonDriver`` does the first two
with the same ``DaemonLaunch`` the server would build and no HTTP, timing each
token's arrival by the rules of ``stats`` (the request counts as sent before the
tokenize command, as the server's clock starts before its own).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from daemons.client import DaemonClient, open_daemon
from daemons.errors import DaemonsError
from daemons.native import NativeBuild
from daemons.roles import DaemonLaunch
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.stats import RequestTiming
from orchestrator.config import Overrides, apply_overrides, build_models

__all__ = ["DaemonDriver", "daemon_launch", "open_daemon_driver"]


class DaemonDriver:
    """A daemon of our own, driven without the HTTP server."""

    health_url: str | None = None

    def __init__(self, client: DaemonClient, label: str = "daemon") -> None:
        self.label = label
        self._client = client

    @property
    def pid(self) -> int | None:
        return self._client.pid

    async def run(self, prompt: Prompt, max_tokens: int) -> RequestTiming:
        timing = RequestTiming(prompt_id=prompt.id, t_sent=time.perf_counter())
        if prompt.messages is not None:
            timing.error = "chat conversations need the HTTP server's chat template"
            return timing
        try:
            ids = await self._client.tokenize(prompt.text, special=True)
            tokens: list[int] = []
            async with self._client.generate(ids, max_tokens) as stream:
                async for token in stream:
                    timing.output_times.append(time.perf_counter())
                    tokens.append(token)
            timing.t_done = time.perf_counter()
            # After the clock stops: only to compare outputs with the HTTP path's.
            timing.text = await self._client.detokenize(tokens)
        except DaemonsError as exc:
            timing.error = f"{type(exc).__name__}: {exc}"
            return timing
        timing.prompt_tokens = len(ids)
        timing.completion_tokens = len(timing.output_times)
        summary = stream.summary
        if summary is not None:
            timing.finish_reason = summary.finish
            # What a served request reports as cached_tokens (orchestrator/generation.py).
            timing.cached_tokens = min(len(ids), summary.prompt_tokens_reused)
            timing.acceptance_length = summary.acceptance_length
        return timing


def daemon_launch(model: Path, native: NativeBuild, *, n_ctx: int, threads: int,
                  n_gpu_layers: int | None = None) -> DaemonLaunch:
    """The launch ``lucerna serve --model MODEL`` would build with these settings."""
    config = apply_overrides(None, Overrides(model=str(model), n_ctx=n_ctx, threads=threads,
                                             n_gpu_layers=n_gpu_layers))
    return build_models(config, native)[0].launch


@asynccontextmanager
async def open_daemon_driver(
    model: Path, native: NativeBuild, *, n_ctx: int, threads: int,
    n_gpu_layers: int | None = None, label: str = "daemon",
) -> AsyncIterator[DaemonDriver]:
    """Start the daemon ``lucerna serve --model MODEL`` would start, with these settings."""
    launch = daemon_launch(model, native, n_ctx=n_ctx, threads=threads,
                           n_gpu_layers=n_gpu_layers)
    async with open_daemon(launch) as client:
        yield DaemonDriver(client, label)
