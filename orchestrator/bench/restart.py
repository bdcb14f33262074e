"""Lucerna's disk tier across a restart (``lucerna bench --disk-restart``).

Starts ``lucerna serve`` with ``--kv-cache-dir`` on an empty directory, sends the
``agent`` set's warm-up and then its first turn (cold: nothing cached anywhere), waits
until the server has written its snapshots to the directory, stops it, starts it again
on the same directory and sends the warm-up and the first turn again. The second first
turn can restore the shared prefix (the system prompt) from disk instead of prefilling
it; the figure is its TTFT over the cold one's. The server's prefix-cache counters
(``/props``) after each run show what it wrote and loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import trio

from orchestrator.bench.client import Endpoint, stream_request
from orchestrator.bench.interference import InterferenceMeter
from orchestrator.bench.prompts import prompt_set
from orchestrator.bench.servers import (
    BenchServerError,
    ServerProcess,
    ServerSettings,
    free_port,
    lucerna_argv,
)
from orchestrator.bench.stats import RequestTiming

__all__ = ["disk_restart_table", "measure_disk_restart"]

Progress = Callable[[str], None]
_WARMUP_TOKENS = 8
# Snapshot files are written by a background task after the request that made them.
_DISK_WRITE_TIMEOUT_S = 300.0


def _cache_status(server: ServerProcess) -> dict[str, Any]:
    props = httpx.get(f"http://127.0.0.1:{server.port}/props", timeout=10).json()
    status: dict[str, Any] = props.get("prefix_cache") or {}
    return status


def _wait_for_disk_writes(server: ServerProcess, kv_dir: Path) -> dict[str, Any]:
    """Until the server has written a snapshot and no write is half done."""
    deadline = time.monotonic() + _DISK_WRITE_TIMEOUT_S
    while time.monotonic() < deadline:
        status = _cache_status(server)
        partial = any(".tmp." in p.name for p in kv_dir.rglob("*"))
        if status.get("disk_writes", 0) >= 1 and not partial:
            time.sleep(1.0)  # a second snapshot queued behind the first
            again = _cache_status(server)
            if again.get("disk_writes") == status.get("disk_writes"):
                return again
        time.sleep(0.25)
    raise BenchServerError(f"{server.label} wrote no prefix snapshot to {kv_dir} within "
                           f"{_DISK_WRITE_TIMEOUT_S:.0f} s; its log: {server.log_path}")


async def _first_turn(endpoint: Endpoint, max_tokens: int,
                      progress: Progress) -> RequestTiming:
    agent = prompt_set("agent")
    timeout = httpx.Timeout(30.0, read=1800.0)
    async with httpx.AsyncClient(timeout=timeout) as client:
        warm = await stream_request(client, endpoint, agent.warmup_prompt,
                                    max_tokens=min(max_tokens, _WARMUP_TOKENS))
        if not warm.ok:
            progress(f"  warm-up failed: {warm.error}")
        others = InterferenceMeter([endpoint.pid])
        others.start()
        timing = await stream_request(client, endpoint, agent.prompts[0],
                                      max_tokens=max_tokens)
        timing.interference = others.stop()
        return timing


def measure_disk_restart(settings: ServerSettings, model_name: str, logs: Path, *,
                         max_tokens: int, startup_timeout: float,
                         progress: Progress) -> dict[str, Any]:
    """The agent set's first turn, cold, then after a restart on the warm disk tier."""
    kv_dir = logs / "kv-cache"
    kv_dir.mkdir()
    settings = replace(settings, prompt_cache=True, kv_cache_dir=kv_dir)
    result: dict[str, Any] = {"kv_cache_dir": str(kv_dir)}
    for phase in ("cold", "warm"):
        port = free_port()
        server = ServerProcess(f"lucerna ({phase})", lucerna_argv(settings, port, model_name),
                               port, logs / f"lucerna-restart-{phase}.log")
        try:
            progress(f"disk restart, {phase}: {' '.join(server.argv)} (log: {server.log_path})")
            server.wait_healthy(startup_timeout)
            endpoint = Endpoint(server.label, server.base_url, model_name, pid=server.pid)
            timing = trio.run(_first_turn, endpoint, max_tokens, progress)
            ttft = "failed: " + str(timing.error) if not timing.ok else (
                f"ttft {(timing.ttft_s or 0) * 1000:.0f} ms")
            progress(f"  turn 1 {ttft}, {timing.prompt_tokens} prompt tokens, "
                     f"{timing.cached_tokens} cached, others {timing.interference or 0:.0%}")
            status = (_wait_for_disk_writes(server, kv_dir) if phase == "cold"
                      else _cache_status(server))
        finally:
            server.stop()
        result[phase] = {"argv": server.argv, "request": timing.to_json(),
                         "prefix_cache": status}
    cold, warm = result["cold"]["request"], result["warm"]["request"]
    result["ttft_ratio"] = (warm["ttft_s"] / cold["ttft_s"]
                            if warm["ok"] and cold["ok"] and cold["ttft_s"] else None)
    return result


def disk_restart_table(result: dict[str, Any]) -> str:
    """The restart measurement as markdown."""
    lines = ["\nLucerna, agent turn 1 across a restart with --kv-cache-dir:\n",
             "| run | TTFT ms | prompt tok | cached tok | disk writes | disk loads | others % |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for phase in ("cold", "warm"):
        r, status = result[phase]["request"], result[phase]["prefix_cache"]
        ttft = "-" if r["ttft_s"] is None else f"{r['ttft_s'] * 1000:.0f}"
        others = "-" if r["interference"] is None else f"{r['interference'] * 100:.0f}"
        lines.append(f"| {phase} | {ttft} | {r['prompt_tokens']} | {r['cached_tokens']} "
                     f"| {status.get('disk_writes')} | {status.get('disk_loads')} | {others} |")
    ratio = result.get("ttft_ratio")
    lines.append(f"\nwarm / cold TTFT: {'-' if ratio is None else f'{ratio:.3f}'}")
    return "\n".join(lines) + "\n"
