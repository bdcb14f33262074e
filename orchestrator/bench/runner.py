"""Runs the cases of a benchmark against one or more targets.

A target is a ``Driver``: something that can run one prompt and say how it went
(``HttpDriver`` for an OpenAI-compatible endpoint; ``direct.DaemonDriver`` for our
daemon protocol without the HTTP server). For every prompt set and concurrency:

- concurrency 1: the requests of all targets are interleaved, request by request,
  in A B / B A order (ABBA), so drift of the machine (thermal, other load) falls
  on every target alike and neither always goes first; each request records how
  much of the machine other programs took meanwhile (``interference``);
- concurrency N > 1: each target in turn gets N workers pulling from one list of
  requests (the set's prompts, cycled on to a multiple of N), while a separate probe
  process (``probe.py``) samples its ``/health`` latency and process-tree memory.

Every target first gets one short warm-up request that is not recorded (for the
``agent`` set an unrelated message, so that no prompt cache holds any of the trace).

A conversation set (``agent``) runs at concurrency 1 only, its turns in order, each
turn A B or B A like any other request; each repeat replays a new conversation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import trio

from orchestrator.bench.client import Api, Endpoint, stream_request
from orchestrator.bench.interference import InterferenceMeter
from orchestrator.bench.probe import READY_LINE, tree_cpu_seconds
from orchestrator.bench.prompts import Prompt, prompt_set
from orchestrator.bench.stats import RequestTiming, Summary, percentile, summarize

__all__ = ["BenchPlan", "CaseRun", "Driver", "HttpDriver", "ProbeRecord", "run_bench"]

Progress = Callable[[str], None]
_WARMUP_TOKENS = 8
# How long the probe process may take to start and see its first /health answer.
_PROBE_START_S = 60.0
_PROBE_MAIN = "import sys; from orchestrator.bench.probe import main; sys.exit(main())"


class Driver(Protocol):
    label: str

    @property
    def health_url(self) -> str | None: ...

    @property
    def pid(self) -> int | None: ...

    async def run(self, prompt: Prompt, max_tokens: int) -> RequestTiming: ...


class HttpDriver:
    """An OpenAI-compatible endpoint, driven with streaming requests."""

    def __init__(self, endpoint: Endpoint, client: httpx.AsyncClient,
                 api: Api = "completions") -> None:
        self.endpoint = endpoint
        self.label = endpoint.label
        self._client = client
        self._api = api

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    @property
    def health_url(self) -> str | None:
        return self.endpoint.root_url + "/health"

    @property
    def pid(self) -> int | None:
        return self.endpoint.pid

    async def run(self, prompt: Prompt, max_tokens: int) -> RequestTiming:
        return await stream_request(self._client, self.endpoint, prompt, api=self._api,
                                    max_tokens=max_tokens)


@dataclass(frozen=True)
class BenchPlan:
    sets: tuple[str, ...] = ("code",)
    max_tokens: int = 128
    repeats: int = 1
    concurrency: tuple[int, ...] = (1,)
    limit: int | None = None
    """Use only the first ``limit`` prompts of each set (smoke runs)."""
    warmup: bool = True
    probe_interval_s: float = 0.1
    probe_sequential: bool = False
    """Also probe /health and memory at concurrency 1 (off: the probe costs CPU)."""


@dataclass(frozen=True)
class ProbeRecord:
    """What the probe process saw during one run."""

    latencies_s: list[float]
    statuses: dict[str, int]
    rss: list[tuple[float, int]]

    def to_json(self) -> dict[str, Any]:
        resident = [r for _, r in self.rss]
        return {
            "probes": len(self.latencies_s),
            "statuses": self.statuses,
            "health_p50_s": percentile(self.latencies_s, 50),
            "health_p99_s": percentile(self.latencies_s, 99),
            "health_max_s": max(self.latencies_s, default=None),
            "rss_first_bytes": resident[0] if resident else None,
            "rss_max_bytes": max(resident, default=None),
            "rss_last_bytes": resident[-1] if resident else None,
            "rss_samples": self.rss,
        }


@dataclass
class CaseRun:
    """The requests one target served for one prompt set at one concurrency."""

    target: str
    set: str
    concurrency: int
    timings: list[RequestTiming] = field(default_factory=list)
    wall_s: float | None = None
    probe: ProbeRecord | None = None
    cpu_s: tuple[float, float] | None = None
    """CPU seconds the target's server used during the run: its own process, its tree."""
    interference: float | None = None
    """Share of the machine other programs took during a concurrent run."""

    def summary(self) -> Summary:
        return summarize(self.timings, self.wall_s)

    def cpu_ms_per_token(self) -> dict[str, float] | None:
        tokens = sum(t.completion_tokens or 0 for t in self.timings if t.ok)
        if self.cpu_s is None or not tokens:
            return None
        own, tree = self.cpu_s
        return {"process": own * 1000 / tokens, "tree": tree * 1000 / tokens}

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "set": self.set,
            "concurrency": self.concurrency,
            "summary": self.summary().to_json(),
            "probe": self.probe.to_json() if self.probe else None,
            "cpu_s": self.cpu_s,
            "cpu_ms_per_token": self.cpu_ms_per_token(),
            "interference": self.interference,
            "requests": [t.to_json() for t in self.timings],
        }


class _Probe:
    """The probe subprocess for one target; ``stop`` returns what it recorded."""

    def __init__(self, driver: Driver, interval: float) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        if driver.health_url is None:
            return
        # Not `-m orchestrator.bench.probe`: the package imports the probe module before
        # runpy runs it as __main__, and Python warns about that on every run.
        argv = [sys.executable, "-c", _PROBE_MAIN, driver.health_url, "--interval", str(interval)]
        if driver.pid is not None:
            argv += ["--pid", str(driver.pid)]
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    async def started(self) -> None:
        """Wait until the probe has seen its first answer: a run shorter than the probe's
        own start (a Python interpreter, httpx, psutil) would otherwise go unwatched."""
        process = self._process
        if process is None or process.stdout is None:
            return
        with trio.move_on_after(_PROBE_START_S):
            # Abandoning the thread is safe: the line it waits for only ever ends it.
            await trio.to_thread.run_sync(process.stdout.readline, abandon_on_cancel=True)

    async def stop(self) -> ProbeRecord | None:
        process = self._process
        if process is None:
            return None
        out, _ = await trio.to_thread.run_sync(process.communicate, b"")
        out = out.removeprefix(READY_LINE)
        if process.returncode != 0 or not out:
            return None
        data = json.loads(out)
        return ProbeRecord(data["latencies_s"], data["statuses"],
                           [(t, r) for t, r in data["rss"]])


class _CpuMeter:
    """CPU seconds a driver's server process (and its tree) used between start and stop."""

    def __init__(self, driver: Driver) -> None:
        self._pid = driver.pid
        self._start = tree_cpu_seconds(self._pid) if self._pid is not None else None

    def stop(self) -> tuple[float, float] | None:
        if self._pid is None or self._start is None:
            return None
        end = tree_cpu_seconds(self._pid)
        if end is None:
            return None
        return end[0] - self._start[0], end[1] - self._start[1]


def requests_for(prompts: Sequence[Prompt], repeats: int, workers: int) -> list[Prompt]:
    """``prompts`` ``repeats`` times over, cycled on to a multiple of ``workers``.

    The aggregate rate of N workers is what N streams in flight deliver: with 20
    requests for 8 workers, the last 4 would run with the other 4 workers idle and the
    figure would be partly a 4-stream one (at most 20/24 of the 8-stream rate where
    every request takes as long)."""
    n = -(-max(workers, len(prompts) * repeats) // workers) * workers
    return [prompts[i % len(prompts)] for i in range(n)]


def _describe(label: str, timing: RequestTiming) -> str:
    if not timing.ok:
        return f"{label} {timing.prompt_id}: FAILED {timing.error}"
    ttft = timing.ttft_s or 0.0
    tps = timing.decode_tps
    others = "" if timing.interference is None else f", others {timing.interference:.0%}"
    return (f"{label} {timing.prompt_id}: ttft {ttft * 1000:.1f} ms, "
            f"{'-' if tps is None else f'{tps:.1f}'} tok/s, "
            f"{timing.prompt_tokens}+{timing.completion_tokens} tokens{others}")


async def _sequential(drivers: Sequence[Driver], set_name: str, requests: list[Prompt],
                      plan: BenchPlan, progress: Progress) -> list[CaseRun]:
    runs = {d.label: CaseRun(d.label, set_name, 1) for d in drivers}
    probes = {d.label: _Probe(d, plan.probe_interval_s)
              for d in drivers} if plan.probe_sequential else {}
    for probe in probes.values():
        await probe.started()
    meters = {d.label: _CpuMeter(d) for d in drivers}
    others = InterferenceMeter(d.pid for d in drivers)
    try:
        for i, prompt in enumerate(requests):
            order = drivers if i % 2 == 0 else list(reversed(drivers))
            for driver in order:
                others.start()
                timing = await driver.run(prompt, plan.max_tokens)
                timing.interference = others.stop()
                runs[driver.label].timings.append(timing)
                progress(f"  [{i + 1}/{len(requests)}] {_describe(driver.label, timing)}")
    finally:
        for label, meter in meters.items():
            runs[label].cpu_s = meter.stop()
        for label, probe in probes.items():
            runs[label].probe = await probe.stop()
    return list(runs.values())


async def _concurrent(driver: Driver, set_name: str, requests: list[Prompt], workers: int,
                      plan: BenchPlan, progress: Progress) -> CaseRun:
    run = CaseRun(driver.label, set_name, workers)
    pending = list(reversed(requests))
    probe = _Probe(driver, plan.probe_interval_s)
    await probe.started()
    meter = _CpuMeter(driver)
    others = InterferenceMeter([driver.pid])

    async def worker() -> None:
        while pending:
            prompt = pending.pop()
            timing = await driver.run(prompt, plan.max_tokens)
            run.timings.append(timing)
            if not timing.ok:
                progress(f"  {_describe(driver.label, timing)}")

    started = time.perf_counter()
    others.start()
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(worker)
    finally:
        run.wall_s = time.perf_counter() - started
        run.cpu_s = meter.stop()
        run.interference = others.stop()
        run.probe = await probe.stop()
    summary = run.summary()
    progress(f"  {driver.label} x{workers}: {len(run.timings)} requests in {run.wall_s:.1f} s, "
             f"{summary.throughput_tps or 0:.1f} tok/s in aggregate, {summary.failed} failed, "
             f"others {run.interference or 0:.0%}")
    return run


async def run_bench(drivers: Sequence[Driver], plan: BenchPlan,
                    progress: Progress = lambda message: None) -> list[CaseRun]:
    """Run every (set, concurrency) case of ``plan`` on every driver."""
    if plan.warmup:
        first = prompt_set(plan.sets[0]).warmup_prompt
        for driver in drivers:
            timing = await driver.run(first, min(plan.max_tokens, _WARMUP_TOKENS))
            progress(f"warm-up {_describe(driver.label, timing)}")
    runs: list[CaseRun] = []
    for set_name in plan.sets:
        prompts = prompt_set(set_name).prompts[:plan.limit]
        replay = prompt_set(set_name).replay
        for workers in plan.concurrency:
            if replay is not None and workers > 1:
                progress(f"{set_name}, concurrency {workers}: skipped (a conversation's turns "
                         "build on each other; it runs at concurrency 1 only)")
                continue
            progress(f"{set_name}, concurrency {workers}:")
            if replay is not None:
                requests = [turn for i in range(1, plan.repeats + 1)
                            for turn in replay(i)[:plan.limit]]
            else:
                requests = requests_for(prompts, plan.repeats, workers)
            if workers == 1:
                runs += await _sequential(drivers, set_name, requests, plan, progress)
            else:
                for driver in drivers:
                    runs.append(await _concurrent(driver, set_name, requests, workers, plan,
                                                  progress))
    return runs
