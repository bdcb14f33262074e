"""Soak: 64 concurrent streaming clients for 60 s (10 s in the fast tier), random
disconnects, one daemon kill a third of the way in.

Afterwards nothing may have leaked (front-end tasks and fds, daemon processes) and every
stream that ran to its end must be well-formed as the OpenAI wire format defines it.
"""

from __future__ import annotations

import json
import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import trio

from daemons.native import NativeBuild
from tests._tiers import Depth
from tests.conftest import LucernaServer

CLIENTS = 64


@dataclass
class Tally:
    completed: int = 0
    disconnected: int = 0
    error_streams: int = 0
    refused: int = 0
    malformed: list[str] = field(default_factory=list)


def check_stream(events: list[str]) -> str | None:
    """None when ``events`` (the data payloads, in order) form a well-formed stream."""
    if not events or events[-1] != "[DONE]":
        return "does not end with [DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    if chunks and "error" in chunks[-1]:
        return None if all("error" not in c for c in chunks[:-1]) else "error before the end"
    if len({c["id"] for c in chunks}) != 1:
        return "chunk ids differ"
    if chunks[0]["choices"][0]["delta"].get("role") != "assistant":
        return "first delta has no role"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    if finishes[-1] not in ("stop", "length") or any(f is not None for f in finishes[:-1]):
        return f"finish reasons {finishes}"
    return None


async def client_loop(base_url: str, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=120) as client:
        while True:
            body = {
                "model": "gemma3-270m",
                "messages": [{"role": "user", "content": f"Say something about {seed}."}],
                "max_tokens": rng.randint(2, 16),
                "temperature": 0,
                "stream": True,
            }
            leave_after = rng.randint(1, 4) if rng.random() < 0.25 else None
            events: list[str] = []
            async with client.stream("POST", f"{base_url}/v1/chat/completions",
                                     json=body) as response:
                if response.status_code == 503:
                    tally.refused += 1
                    await trio.sleep(0.2)
                    continue
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                    if leave_after is not None and len(events) >= leave_after:
                        break
            if leave_after is not None and len(events) >= leave_after:
                tally.disconnected += 1
                continue
            problem = check_stream(events)
            if problem:
                tally.malformed.append(problem)
            elif "error" in events[-2]:
                tally.error_streams += 1
            else:
                tally.completed += 1


@pytest.mark.slow
async def test_soak(native: NativeBuild, default_model: Path, tmp_path: Path,
                    depth: Depth) -> None:
    duration_s = depth(quick=10.0, full=60.0)
    server = LucernaServer(tmp_path / "serve.log", "--model", "default",
                           "--n-ctx", "1024", "--queue-limit",
                           str(CLIENTS))
    try:
        server.wait_healthy()
        async with httpx.AsyncClient() as http:
            before = (await http.get(f"{server.base_url}/status")).json()
        first_pid = before["models"]["gemma3-270m"]["pid"]
        tally = Tally()

        async def kill_daemon_once() -> None:
            await trio.sleep(duration_s / 3)
            os.kill(first_pid, signal.SIGKILL)

        with trio.move_on_after(duration_s):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_daemon_once)
                for seed in range(CLIENTS):
                    nursery.start_soon(client_loop, server.base_url, seed, tally)

        # Let the server notice the last disconnects, then look for leaks.
        async with httpx.AsyncClient() as http:
            with trio.fail_after(30):
                while True:
                    after = (await http.get(f"{server.base_url}/status")).json()
                    q = after["models"]["gemma3-270m"]["queue"]
                    if q["waiting"] == 0 and q["running"] == 0:
                        break
                    await trio.sleep(0.1)
            await trio.sleep(1.0)
            after = (await http.get(f"{server.base_url}/status")).json()
    finally:
        server.stop()

    assert not tally.malformed, tally.malformed[:5]
    # A busy 2-core box serves a few per second, around a restart.
    assert tally.completed >= depth(quick=2, full=10), tally
    assert tally.disconnected > 0, tally
    assert tally.refused == 0, tally
    model = after["models"]["gemma3-270m"]
    assert model["restarts"] == 1 and model["crashes"] == 1, model
    assert model["pid"] != first_pid
    # One daemon: the restarted one; the killed one was reaped.
    children = psutil.Process(after["server"]["pid"]).children(recursive=True) \
        if psutil.pid_exists(after["server"]["pid"]) else []
    assert [c.pid for c in children] in ([], [model["pid"]])
    assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == "zombie"
    # No leaked tasks or fds in the front end (a little slack for the status request itself).
    assert after["server"]["tasks"] <= before["server"]["tasks"] + 2, (before, after)
    assert after["server"]["open_fds"] <= before["server"]["open_fds"] + 4, (before, after)
