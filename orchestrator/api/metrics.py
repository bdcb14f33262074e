"""Observability: ``GET /metrics`` (Prometheus text format) and ``GET /status`` (JSON).

Two kinds of numbers:

- Request numbers, counted as requests pass: ``lucerna_requests_total{model,
  endpoint,status}``, ``lucerna_request_duration_seconds{model,endpoint}``,
  ``lucerna_time_to_first_token_seconds{model}``, ``lucerna_tokens_prompt_total`` and
  ``lucerna_tokens_generated_total{model}``. A pure ASGI middleware times each
  request and puts a ``RequestRecord`` in a context variable; the model registry
  names the model a request is routed to, and each model's generation events (first
  output, the final usage) land in the same record, because the handler and its
  streaming body run in tasks that inherit the middleware's context.
- State numbers, read fresh on every scrape by a custom collector: each
  supervisor's state and restart/crash/failed-load counts, each queue's depth, and
  the daemon's process facts (RSS, CPU seconds, open fds, threads) from psutil,
  summed over the daemon and its descendants (its process group, as started).

Labels are bounded: ``model`` is a configured name or ``""``; ``endpoint`` is a
route's path or ``"unmatched"``, never the raw request path.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import prometheus_client
import psutil
import trio
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.events import Event, Finished
from orchestrator.models import ModelRegistry, ServedModel
from orchestrator.slots import SlotClient
from orchestrator.supervisor import DaemonState

__all__ = ["Metrics", "MetricsMiddleware", "ProcessStats", "RequestRecord", "daemon_process_stats"]

# ``*_created`` series double every counter and say nothing a scraper needs.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def lucerna_version() -> str:
    try:
        return version("lucerna")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass
class RequestRecord:
    """What the metrics learn about one HTTP request while it runs."""

    started: float
    model: str = ""
    first_output: float | None = None


_current: ContextVar[RequestRecord | None] = ContextVar("lucerna_request", default=None)


@dataclass(frozen=True)
class ProcessStats:
    rss_bytes: int
    cpu_seconds: float
    open_fds: int
    threads: int
    processes: int


def daemon_process_stats(pid: int | None) -> ProcessStats | None:
    """RSS, CPU time, fds and threads of ``pid`` and its descendants; None if it is gone."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    rss = fds = threads = count = 0
    cpu = 0.0
    for process in members:
        try:
            with process.oneshot():
                rss += process.memory_info().rss
                times = process.cpu_times()
                cpu += times.user + times.system
                fds += process.num_fds()
                threads += process.num_threads()
                count += 1
        except psutil.Error:  # exited meanwhile, or not ours to inspect
            continue
    return ProcessStats(rss, cpu, fds, threads, count) if count else None


def _live_pid(model: ServedModel) -> int | None:
    """The daemon's pid on this machine; None when it is not running, or runs on another
    host (the local process is then its launcher, whose memory and CPU say nothing)."""
    client = model.supervisor.client
    if client is None or client.exited.is_set() or client.launch.host is not None:
        return None
    return client.pid


def _tokenizer_pid(model: ServedModel) -> int | None:
    client = model.supervisor.client
    if not isinstance(client, SlotClient) or client.tokenizer.exited.is_set():
        return None
    return client.tokenizer.pid


class _StateCollector(Collector):
    """Reads supervisors, queues and daemon processes at scrape time."""

    def __init__(self, registry: ModelRegistry, started_unix: float) -> None:
        self._registry = registry
        self._started = started_unix

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ("model",)) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=list(labels))

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=["model"])

        info = gauge("lucerna_info", "Always 1; the version is a label.", ("version",))
        info.add_metric([lucerna_version()], 1)
        start = GaugeMetricFamily("lucerna_start_time_seconds",
                                  "Unix time the server started.", value=self._started)
        up = gauge("lucerna_daemon_up", "1 when the model's daemon is ready to serve.")
        state = gauge("lucerna_daemon_state", "1 for the supervisor's current state.",
                      ("model", "state"))
        restarts = counter("lucerna_daemon_restarts", "Daemon starts after the first.")
        crashes = counter("lucerna_daemon_crashes", "Daemon exits nobody asked for.")
        failed = counter("lucerna_daemon_failed_loads", "Daemon starts that never got ready.")
        rss = gauge("lucerna_daemon_resident_memory_bytes", "Daemon resident memory (RSS).")
        cpu = counter("lucerna_daemon_cpu_seconds", "Daemon user+system CPU time.")
        fds = gauge("lucerna_daemon_open_fds", "Daemon open file descriptors.")
        threads = gauge("lucerna_daemon_threads", "Daemon threads.")
        waiting = gauge("lucerna_queue_waiting", "Requests waiting for the model.")
        running = gauge("lucerna_queue_running", "Requests the model is serving.")
        limit = gauge("lucerna_queue_limit", "Requests that may wait before new ones get 503.")
        refused = counter("lucerna_queue_refused", "Requests refused because the queue was full.")
        n_ctx = gauge("lucerna_model_context_tokens", "The model's context size.")
        cache_bytes = gauge("lucerna_prefix_cache_bytes", "Bytes the prefix cache holds, per tier.",
                            ("model", "tier"))
        cache_budget = gauge("lucerna_prefix_cache_budget_bytes",
                             "The prefix cache's byte budget per tier (0 on disk: no limit).",
                             ("model", "tier"))
        cache_counts = {
            key: counter(f"lucerna_prefix_cache_{key}", doc) for key, doc in (
                ("hits", "Generations that reused cached prompt tokens."),
                ("misses", "Generations that reused none."),
                ("tokens_reused", "Prompt tokens restored instead of prefilled."),
                ("evictions_ram", "Snapshots evicted from host RAM."),
                ("evictions_disk", "Snapshot files evicted from disk."),
                ("disk_writes", "Snapshot files written."),
                ("disk_loads", "Snapshot files loaded."),
                ("disk_rejected", "Snapshot files refused (other identity, truncated, corrupt)."),
            )}
        residency = {
            "wakes": CounterMetricFamily("lucerna_model_wakes", "Wakes of a model on demand: "
                                         "kind start (its daemon) or unpark.",
                                         labels=["model", "kind"]),
            "wake_seconds": CounterMetricFamily("lucerna_model_wake_seconds", "Time spent "
                                                "waking, by kind.", labels=["model", "kind"]),
            "parks": CounterMetricFamily("lucerna_model_parks", "Parks (kind park) and stops "
                                         "(kind stop) by reason: idle, lru, request.",
                                         labels=["model", "kind", "reason"]),
            "park_seconds": CounterMetricFamily("lucerna_model_park_seconds", "Time spent "
                                                "parking or stopping.",
                                                labels=["model", "kind"]),
        }
        memory = gauge("lucerna_model_memory_bytes",
                       "Weights the model holds now (0 parked or unloaded), from its stats.")
        parked = gauge("lucerna_model_parked", "1 while the model is parked.")
        for model in self._registry:
            name = [model.name]
            supervisor = model.supervisor
            if model.residency is not None:
                r = model.residence
                for kind, n in r.wakes.items():
                    residency["wakes"].add_metric([model.name, kind], n)
                    residency["wake_seconds"].add_metric([model.name, kind],
                                                         r.wake_seconds[kind])
                for (kind, reason), n in r.parks.items():
                    residency["parks"].add_metric([model.name, kind, reason], n)
                for kind, seconds in r.park_seconds.items():
                    residency["park_seconds"].add_metric([model.name, kind], seconds)
                memory.add_metric(name, r.memory_bytes if model.residency.is_awake(model)
                                  else 0)
                parked.add_metric(name, 1 if r.parked else 0)
            up.add_metric(name, 1 if supervisor.state is DaemonState.READY else 0)
            for each in DaemonState:
                state.add_metric([model.name, each.value], 1 if supervisor.state is each else 0)
            restarts.add_metric(name, supervisor.restarts)
            crashes.add_metric(name, supervisor.crashes)
            failed.add_metric(name, supervisor.failed_loads)
            stats = daemon_process_stats(_live_pid(model))
            if stats is not None:
                rss.add_metric(name, stats.rss_bytes)
                cpu.add_metric(name, stats.cpu_seconds)
                fds.add_metric(name, stats.open_fds)
                threads.add_metric(name, stats.threads)
            waiting.add_metric(name, model.queue.waiting)
            running.add_metric(name, model.queue.running)
            limit.add_metric(name, model.queue.limit)
            refused.add_metric(name, model.queue.refused)
            n_ctx.add_metric(name, model.n_ctx)
            cache = model.prefix_cache
            if cache is not None:
                for tier, held, budget in (("ram", cache.stats.ram_bytes, cache.settings.ram_bytes),
                                           ("disk", cache.stats.disk_bytes,
                                            cache.settings.disk_bytes)):
                    cache_bytes.add_metric([model.name, tier], held)
                    cache_budget.add_metric([model.name, tier], budget)
                for key, family in cache_counts.items():
                    family.add_metric(name, getattr(cache.stats, key))
        yield from (info, start, up, state, restarts, crashes, failed, rss, cpu, fds, threads,
                    waiting, running, limit, refused, n_ctx, cache_bytes, cache_budget,
                    *cache_counts.values(), memory, parked, *residency.values())


class Metrics:
    """The metrics of one app: its own Prometheus registry, hooks, and two routes."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.models = registry
        self.started_unix = time.time()
        self._started = time.monotonic()
        self.prometheus = CollectorRegistry()
        self.requests = Counter(
            "lucerna_requests", "HTTP requests by routed model, endpoint and status.",
            ["model", "endpoint", "status"], registry=self.prometheus)
        self.duration = Histogram(
            "lucerna_request_duration_seconds", "From request start to the last byte sent.",
            ["model", "endpoint"], buckets=_LATENCY_BUCKETS, registry=self.prometheus)
        self.ttft = Histogram(
            "lucerna_time_to_first_token_seconds",
            "From request start (queueing included) to the first output text or tool call.",
            ["model"], buckets=_LATENCY_BUCKETS, registry=self.prometheus)
        self.prompt_tokens = Counter("lucerna_tokens_prompt", "Prompt tokens of generations.",
                                     ["model"], registry=self.prometheus)
        self.generated_tokens = Counter("lucerna_tokens_generated", "Tokens generated.",
                                        ["model"], registry=self.prometheus)
        self.prometheus.register(_StateCollector(registry, self.started_unix))
        ProcessCollector(namespace="lucerna_frontend", registry=self.prometheus)
        registry.route_observers.append(self._routed)
        for model in registry:
            model.observers.append(self._observe)

    # --- hooks ---------------------------------------------------------------------------

    @staticmethod
    def _routed(model: ServedModel) -> None:
        record = _current.get()
        if record is not None:
            record.model = model.name

    def _observe(self, model: ServedModel, event: Event) -> None:
        if isinstance(event, Finished):
            self.prompt_tokens.labels(model.name).inc(event.prompt_tokens)
            self.generated_tokens.labels(model.name).inc(event.completion_tokens)
            return
        record = _current.get()
        if record is not None and record.first_output is None:
            record.first_output = time.perf_counter()
            self.ttft.labels(model.name).observe(record.first_output - record.started)

    def finish(self, record: RequestRecord, endpoint: str, status: str) -> None:
        self.requests.labels(record.model, endpoint, status).inc()
        self.duration.labels(record.model, endpoint).observe(time.perf_counter() - record.started)

    # --- routes --------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [Route("/metrics", self.metrics_endpoint, methods=["GET"]),
                Route("/status", self.status_endpoint, methods=["GET"])]

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(prometheus_client.generate_latest(self.prometheus),
                        media_type=prometheus_client.CONTENT_TYPE_LATEST)

    async def status_endpoint(self, request: Request) -> Response:
        return JSONResponse(self.status())

    def status(self) -> dict[str, Any]:
        return {
            "version": lucerna_version(),
            "started": self.started_unix,
            "uptime_s": round(time.monotonic() - self._started, 3),
            "server": _server_status(),
            "models": {model.name: self._model_status(model) for model in self.models},
        }

    @staticmethod
    def _model_status(model: ServedModel) -> dict[str, Any]:
        supervisor = model.supervisor
        pid = _live_pid(model)
        stats = daemon_process_stats(pid)
        return {
            "state": supervisor.state.value,
            "detail": supervisor.detail,
            "host": supervisor.launch.host,
            "pid": pid,
            "restarts": supervisor.restarts,
            "crashes": supervisor.crashes,
            "failed_loads": supervisor.failed_loads,
            "last_exit": supervisor.last_exit,
            "queue": {"waiting": model.queue.waiting, "running": model.queue.running,
                      "refused": model.queue.refused, "limit": model.queue.limit},
            "rss_bytes": stats.rss_bytes if stats else None,
            "cpu_seconds": round(stats.cpu_seconds, 3) if stats else None,
            "open_fds": stats.open_fds if stats else None,
            "threads": stats.threads if stats else None,
            "n_ctx": model.n_ctx,
            # Requests that generate at once (``--parallel``), each with ``n_ctx`` tokens;
            # with more than one, the model's tokenizer daemon (orchestrator/slots.py).
            "parallel": model.parallel,
            # How it was chosen: configured, or fitted to the memory (parallel_default.py).
            "parallel_choice": model.parallel_status,
            "tokenizer_pid": _tokenizer_pid(model),
            "architecture": model.info.architecture,
            "role": model.launch.role.name,
            "max_output_tokens": model.max_output_tokens,
            "prefix_cache": model.prefix_cache.status() if model.prefix_cache else None,
            # models on demand (orchestrator/residency.py): state, memory, wakes, parks
            "residency": model.residency.status(model) if model.residency else None,
        }


def _count_tasks(task: trio.lowlevel.Task) -> int:
    return 1 + sum(_count_tasks(child) for nursery in task.child_nurseries
                   for child in nursery.child_tasks)


def _server_status() -> dict[str, Any]:
    """The front end's own process: what a leak (tasks, fds, memory) would show in."""
    me = psutil.Process()
    root = trio.lowlevel.current_root_task()
    return {
        "pid": me.pid,
        "rss_bytes": me.memory_info().rss,
        "open_fds": me.num_fds(),
        "threads": me.num_threads(),
        "tasks": _count_tasks(root) if root is not None else None,
    }


class MetricsMiddleware:
    """Times and counts every HTTP request; pure ASGI so streams pass untouched."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(started=time.perf_counter())
        endpoint = _endpoint_label(scope)
        status: int | None = None

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        token = _current.set(record)
        failed = False
        try:
            await self.app(scope, receive, send_and_note)
        except BaseException:
            failed = True
            raise
        finally:
            _current.reset(token)
            # No response at all: the app failed (500), or the client left first (499).
            label = str(status) if status is not None else ("500" if failed else "499")
            self.metrics.finish(record, endpoint, label)


def _endpoint_label(scope: Scope) -> str:
    # Starlette puts itself in scope["app"] before its middleware runs; its routes
    # give the label, so a client choosing odd paths cannot grow the label set.
    for route in getattr(scope.get("app"), "routes", ()):
        with contextlib.suppress(Exception):
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return str(getattr(route, "path", "unmatched"))
    return "unmatched"
