"""The arms of a scenario run, started and stopped: servers, the peer, our daemon.

``open_arms`` starts every HTTP arm at once (``lucerna serve`` and ``llama-server``
subprocesses, ``servers.ServerProcess``), waits until each is healthy, and always stops
them all, however the run ends. A ``daemon`` arm (our daemon driven directly, for the
benchmark-only oracle proposer, which no ``serve`` flag reaches) starts later, with
``open_daemon_arm``, because its oracle needs the arm's salted prompts: they are first
decoded greedily by a plain daemon of the same settings, and those transcripts are what
the oracle proposes from (PROTOCOL.md 5.9).

Each ``RunningArm`` carries what the report names: the side, the argv, the peer's
build, and the head (``head_tokens``) its probes measured.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import trio

from daemons.client import open_daemon
from daemons.native import NativeBuild
from daemons.peer import PeerBuild
from orchestrator.bench.client import Api, Endpoint
from orchestrator.bench.direct import DaemonDriver, daemon_launch
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.runner import Driver, HttpDriver
from orchestrator.bench.scenarios._declare import Arm
from orchestrator.bench.servers import (
    ServerProcess,
    ServerSettings,
    free_port,
    llama_server_argv,
    lucerna_argv,
)

__all__ = ["ArmPlan", "RunningArm", "open_arms", "open_daemon_arm"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ArmPlan:
    """An arm as it will run: its label resolved, and the peer build for a peer arm."""

    arm: Arm
    label: str
    peer: PeerBuild | None = None


@dataclass
class RunningArm:
    plan: ArmPlan
    driver: Driver
    argv: list[str] | None
    first_token: Callable[[str], Any]
    """``async (text) -> int``: the first token of ``text`` in the served vocabulary."""
    head_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.plan.label

    @property
    def pid(self) -> int | None:
        return self.driver.pid

    def describe(self) -> dict[str, Any]:
        arm = self.plan.arm
        return {"label": self.label, "side": arm.side, "argv": self.argv,
                "flags": list(arm.flags), "why": arm.why, "body": dict(arm.body),
                "oracle_accept": arm.oracle_accept,
                "peer": self.plan.peer.describe() if self.plan.peer else None,
                "head_tokens": self.head_tokens, **self.extra}


def _argv(plan: ArmPlan, settings: ServerSettings, port: int, model_name: str) -> list[str]:
    if plan.arm.side == "peer":
        assert plan.peer is not None
        return [*llama_server_argv(plan.peer.server, settings, port, model_name),
                *plan.arm.flags]
    return [*lucerna_argv(settings, port, model_name), *plan.arm.flags]


@asynccontextmanager
async def open_arms(plans: Sequence[ArmPlan], settings: ServerSettings, model_name: str,
                    api: Api, logs: Path, *, startup_timeout: float,
                    progress: Progress) -> AsyncIterator[list[RunningArm]]:
    """Start the HTTP arms of ``plans`` side by side; yield them healthy; stop them all."""
    servers: list[ServerProcess] = []
    timeout = httpx.Timeout(30.0, read=1800.0)
    try:
        for plan in plans:
            port = free_port()
            argv = _argv(plan, settings, port, model_name)
            progress(f"starting {plan.label}: {' '.join(argv)}")
            servers.append(ServerProcess(plan.label, argv, port, logs / f"{plan.label}.log"))
        for server in servers:
            await trio.to_thread.run_sync(server.wait_healthy, startup_timeout)
            progress(f"{server.label} is healthy (log: {server.log_path})")
        async with httpx.AsyncClient(timeout=timeout,
                                     limits=httpx.Limits(max_connections=256)) as client:
            running = []
            for plan, server in zip(plans, servers, strict=True):
                endpoint = Endpoint(plan.label, server.base_url, model_name, pid=server.pid,
                                    extra_body=dict(plan.arm.body))
                running.append(RunningArm(plan, HttpDriver(endpoint, client, api),
                                          server.argv, _http_first_token(client, endpoint)))
            yield running
    finally:
        for server in reversed(servers):
            code = await trio.to_thread.run_sync(server.stop)
            progress(f"stopped {server.label} (exit {code})")


def _http_first_token(client: httpx.AsyncClient, endpoint: Endpoint) -> Callable[[str], Any]:
    async def first_token(text: str) -> int:
        # llama-server's /tokenize, which Lucerna serves too (orchestrator/api/tokenization).
        response = await client.post(endpoint.root_url + "/tokenize",
                                     json={"content": text, "add_special": False},
                                     headers=endpoint.headers())
        response.raise_for_status()
        return int(response.json()["tokens"][0])
    return first_token


async def _transcripts(launch: Any, prompts: Sequence[Prompt], max_tokens: int) -> bytes:
    """int32 LE ids: each prompt and its greedy continuation, ``-1`` after each."""
    words: list[int] = []
    async with open_daemon(launch) as client:
        for prompt in prompts:
            ids = await client.tokenize(prompt.text, special=True)
            out: list[int] = []
            async with client.generate(ids, max_tokens) as stream:
                async for token in stream:
                    out.append(token)
            words += [*ids, *out, -1]
    return struct.pack(f"<{len(words)}i", *words)


@asynccontextmanager
async def open_daemon_arm(plan: ArmPlan, model: Path, native: NativeBuild,
                          settings: ServerSettings, draft: Path | None,
                          prompts: Sequence[Prompt], max_tokens: int, *,
                          progress: Progress) -> AsyncIterator[RunningArm]:
    """Our daemon, driven directly, with the oracle at ``plan.arm.oracle_accept`` (or
    plain when it is None); yields it ready, always stops it."""
    launch = daemon_launch(model, native, n_ctx=settings.n_ctx, threads=settings.threads,
                           n_gpu_layers=settings.n_gpu_layers)
    launch = replace(launch, extra_args=(*launch.extra_args, *plan.arm.flags))
    async with AsyncExitStack() as stack:
        accept = plan.arm.oracle_accept
        if accept is not None:
            progress(f"{plan.label}: decoding its {len(prompts)} prompts greedily for the "
                     "oracle's transcripts")
            data = await _transcripts(launch, prompts, max_tokens)
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="lucerna-oracle-")))
            transcripts = folder / "transcripts.bin"
            transcripts.write_bytes(data)
            launch = replace(launch, draft=draft, extra_args=(
                *launch.extra_args, f"--draft-oracle={transcripts}",
                f"--oracle-accept={accept:g}"))
        client = await stack.enter_async_context(open_daemon(launch))
        progress(f"{plan.label} is ready (daemon pid {client.pid})")

        async def first_token(text: str) -> int:
            return (await client.tokenize(text, special=False))[0]

        yield RunningArm(plan, DaemonDriver(client, plan.label), list(client.argv),
                         first_token)
