"""Samples a server's ``/health`` latency and memory, from a process of its own.

The benchmark client is itself busy (it parses every streamed chunk of up to 64
concurrent requests); a prober inside it would measure its own event loop as much
as the server. So the runner runs ``main`` in a separate process; by hand::

    python -m orchestrator.bench.probe URL [--pid PID] [--interval S]

Once its first probe has been answered it prints ``READY_LINE``, so the runner can
start the load only when the probe is watching (starting Python takes longer than
some whole runs); it probes until its stdin closes, then prints one JSON object:
every probe's latency and status, and the resident memory (RSS) of the server's
process tree (the process and all its descendants: for Lucerna the front end and
its daemons) over time.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import psutil

__all__ = ["READY_LINE", "main", "tree_cpu_seconds", "tree_rss"]

READY_LINE = b"probing\n"


def tree_rss(pid: int) -> int | None:
    """Resident bytes of ``pid`` and its descendants; None once it is gone."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue  # a child that exited between listing and reading
    return total


def tree_cpu_seconds(pid: int) -> tuple[float, float] | None:
    """CPU seconds (user + system) used so far by ``pid`` alone and by its whole tree.

    Unlike wall time this does not grow when other programs take the CPU, so the
    per-token CPU of a server (and of its front end alone) compares across runs.
    """
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    own = total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used = times.user + times.system
        total += used
        if process.pid == pid:
            own = used
    return own, total


def probe(url: str, pid: int | None, interval: float, stop: threading.Event,
          on_first: Callable[[], None] = lambda: None) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    rss: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    with httpx.Client(timeout=10.0) as client:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                status = str(client.get(url).status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if pid is not None and (resident := tree_rss(pid)) is not None:
                rss.append((round(time.perf_counter() - t0, 3), resident))
            if len(latencies) == 1:
                on_first()
            stop.wait(max(0.0, interval - (time.perf_counter() - started)))
    return {"url": url, "interval_s": interval, "latencies_s": latencies,
            "statuses": statuses, "pid": pid, "rss": rss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.bench.probe")
    parser.add_argument("url", help="the URL to GET, e.g. http://127.0.0.1:8080/health")
    parser.add_argument("--pid", type=int, help="server process whose tree's RSS to sample")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between probes")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def stop_at_eof() -> None:  # the runner ends the probe by closing our stdin
        sys.stdin.read()
        stop.set()

    def say_ready() -> None:
        sys.stdout.buffer.write(READY_LINE)
        sys.stdout.flush()

    threading.Thread(target=stop_at_eof, daemon=True).start()
    result = probe(args.url, args.pid, args.interval, stop, say_ready)
    json.dump(result, sys.stdout)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
