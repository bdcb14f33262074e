"""How much of the machine other programs took while a request ran.

On a small shared machine a benchmark's wall-clock figures say as much about the
neighbours as about the server: when the engine runs as many threads as there are
cores, one thread preempted by an unrelated process stalls every barrier of every
layer, and a token can take ten times as long. Rather than hope for a quiet
machine, each request records its interference: the CPU time that processes other
than ours (the benchmark, its probe, the targets and their children) used during
the request, as a share of the machine's capacity over that interval. The report
can then compare only the pairs that both ran undisturbed, by a criterion that
looks at neither target's speed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

__all__ = ["InterferenceMeter"]


def _machine_busy_s() -> float:
    t = psutil.cpu_times()
    # guest time is already inside user (and guest_nice inside nice) on Linux.
    return sum(getattr(t, name, 0.0) for name in
               ("user", "nice", "system", "irq", "softirq", "steal"))


def _processes(pids: Iterable[int]) -> dict[int, psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for process in (root, *root.children(recursive=True)):
                found[process.pid] = process
        except psutil.Error:
            continue
    return found


def _cpu_s(processes: Iterable[psutil.Process]) -> dict[int, float]:
    used: dict[int, float] = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[process.pid] = times.user + times.system
    return used


class InterferenceMeter:
    """``start()`` before a request, ``stop()`` after: the others' share, in ``[0, 1]``."""

    def __init__(self, pids: Iterable[int | None]) -> None:
        self._roots = {os.getpid(), *(pid for pid in pids if pid is not None)}
        self._n_cpu = psutil.cpu_count() or 1
        self._t0 = 0.0
        self._busy0 = 0.0
        self._ours0: dict[int, float] = {}

    def start(self) -> None:
        self._ours0 = _cpu_s(_processes(self._roots).values())
        self._busy0 = _machine_busy_s()
        self._t0 = time.monotonic()

    def stop(self) -> float | None:
        elapsed = time.monotonic() - self._t0
        busy = _machine_busy_s() - self._busy0
        ours1 = _cpu_s(_processes(self._roots).values())
        # Only processes seen at both ends count as ours; one that started in between
        # is counted as ours from zero (it is a child of ours, e.g. a restarted daemon).
        ours = sum(used - self._ours0.get(pid, 0.0) for pid, used in ours1.items())
        if elapsed <= 0:
            return None
        return min(1.0, max(0.0, (busy - ours) / (elapsed * self._n_cpu)))
