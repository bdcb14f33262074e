"""One scenario run, end to end: plan the arms, build the peer, start, salt, send, record.

1. **Plan**: the scenario's arms (the ``--arms`` selection; optional arms only when
   named), each ``peer`` arm once per chosen peer build (``--peer``: the pristine
   llama-server by default, ``patched``, or ``both``) and renamed after it
   (``llama-server...``, ``llama-server-patched...``); its comparisons likewise.
2. **Build and start**: the peer builds (``daemons.peer``, once per pin, backend and
   series), then every HTTP arm side by side on the same GGUF and shared settings.
3. **Salt**: every request key of every arm gets a salt with a fresh first token
   (``salt.py``), drawn through the first arm's ``/tokenize``; the fixed head is computed
   (``head.py``); daemon arms start (the oracle after its transcripts).
4. **Send**: one warm-up request per arm, then every round on every arm, alternating
   (``schedule.py``).
5. **Record**: the document of ``record.py``: the arms' command lines and builds, every
   request and round, the spreads and ratios (``outcome.py``), the cold invariant and
   the warm expectation (``fairness.py``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from daemons.engine import selected_backend
from daemons.gguf_info import read_gguf_info, read_gguf_scalars
from daemons.peer import PeerBuild, PeerVariant, ensure_llama_server, peer_build
from orchestrator.bench.arms import ArmPlan, RunningArm, open_arms, open_daemon_arm
from orchestrator.bench.fairness import cold_violations, warm_misses
from orchestrator.bench.head import shared_head
from orchestrator.bench.machine import commit, machine
from orchestrator.bench.outcome import compare, groups
from orchestrator.bench.record import FORMAT, new_run_id
from orchestrator.bench.runner import HttpDriver
from orchestrator.bench.salt import SaltBook
from orchestrator.bench.scenarios._declare import Comparison, Options, Scenario
from orchestrator.bench.schedule import run_rounds, warm_up
from orchestrator.bench.servers import ServerSettings
from orchestrator.chat_template import FALLBACK_TEMPLATE

__all__ = ["ALL_ARMS", "RunSettings", "plan_arms", "plan_comparisons", "run_scenario"]

Progress = Callable[[str], None]
ALL_ARMS = "all"
_WARM_UP_KEY = "warm-up"
_PEER = "peer"


@dataclass(frozen=True)
class RunSettings:
    scenario: Scenario
    options: Options
    peers: tuple[PeerVariant, ...] = ("pristine",)
    arms: tuple[str, ...] | None = None
    """Declared arm labels to run (``all``: every one); None: the non-optional ones."""
    seed: int = 0
    threads: int = 1
    n_gpu_layers: int | None = None
    n_ctx: int | None = None
    parallel: int | None = None
    model_name: str = "bench"
    startup_timeout: float = 600.0
    argv: tuple[str, ...] = ()
    logs: Path | None = None
    """Where the servers' logs go; None: a new temporary directory."""


def _resolved(label: str, peer: PeerBuild | None) -> str:
    if peer is None or not label.startswith(_PEER):
        return label
    return peer.label + label[len(_PEER):]


def plan_arms(scenario: Scenario, options: Options, peers: Sequence[PeerBuild],
              selection: Sequence[str] | None) -> list[ArmPlan]:
    """The arms that will run, each peer arm once per peer build, in declared order."""
    declared = scenario.arms(options)
    if selection is not None and ALL_ARMS not in selection:
        known = {arm.label for arm in declared}
        unknown = [label for label in selection if label not in known]
        if unknown:
            raise ValueError(f"{scenario.name} has no arm {', '.join(unknown)}; its arms: "
                             f"{', '.join(sorted(known))}")
    chosen = [arm for arm in declared
              if (selection is None and not arm.optional)
              or (selection is not None and (ALL_ARMS in selection or arm.label in selection))]
    plans: list[ArmPlan] = []
    for arm in chosen:
        if arm.side == "peer":
            plans += [ArmPlan(arm, _resolved(arm.label, peer), peer) for peer in peers]
        else:
            plans.append(ArmPlan(arm, arm.label))
    return plans


def plan_comparisons(scenario: Scenario, options: Options, peers: Sequence[PeerBuild],
                     plans: Sequence[ArmPlan]) -> list[Comparison]:
    """The scenario's comparisons among the arms that run, once per peer build."""
    present = {plan.label for plan in plans}
    out: list[Comparison] = []
    for comparison in scenario.comparisons(options):
        labels = (comparison.candidate, *comparison.baseline)
        builds: Sequence[PeerBuild | None] = (
            peers if any(label.startswith(_PEER) for label in labels) else [None])
        for peer in builds:
            candidate = _resolved(comparison.candidate, peer)
            baseline = tuple(b for b in (_resolved(b, peer) for b in comparison.baseline)
                             if b in present)
            if candidate in present and baseline:
                out.append(replace(comparison, candidate=candidate, baseline=baseline))
    return out


def _settings(run: RunSettings, logs: Path, progress: Progress) -> ServerSettings:
    sizing = run.scenario.sizing(run.options)
    info = read_gguf_info(run.options.model)
    n_ctx = run.n_ctx or sizing.n_ctx
    if run.n_ctx is None and info.context_length and n_ctx > info.context_length:
        progress(f"n_ctx {n_ctx} is beyond the model's training context; using "
                 f"{info.context_length} (give --n-ctx to go beyond it)")
        n_ctx = info.context_length
    template = None
    if info.chat_template is None:
        # Lucerna renders a template-less model's chats with its fallback, llama-server
        # with ChatML: give the peer the same template, so both prefill the same prompt.
        template = logs / "fallback-chat-template.jinja"
        template.write_text(FALLBACK_TEMPLATE, encoding="utf-8")
    parallel = run.parallel or sizing.parallel
    return ServerSettings(model=run.options.model, n_ctx=n_ctx, threads=run.threads,
                          n_gpu_layers=run.n_gpu_layers,
                          queue_limit=max(16, *(run.options.levels or run.scenario.levels),
                                          parallel),
                          prompt_cache=True, chat_template_file=template, parallel=parallel)


def _options(run: RunSettings) -> Options:
    draft = run.options.draft
    if draft is None:
        return run.options
    block = read_gguf_scalars(draft).get("dflash.block_size")
    return replace(run.options, draft_block=int(block) if isinstance(block, int) else None)


def run_scenario(run: RunSettings, progress: Progress) -> dict[str, Any]:
    """Run the scenario; return its document (``record.py``)."""
    run = replace(run, options=_options(run))
    scenario, options = run.scenario, run.options
    backend = selected_backend()
    described = [peer_build(backend, variant=v) for v in run.peers]
    plans = plan_arms(scenario, options, described, run.arms)
    if not plans:
        raise ValueError(f"no arms of {scenario.name} selected")
    if not any(plan.arm.side != "daemon" for plan in plans):
        raise ValueError("a run needs at least one HTTP arm (its /tokenize draws the salts)")
    built = {v: ensure_llama_server(backend, variant=v, progress=progress)
             for v in run.peers if any(p.peer and p.peer.variant == v for p in plans)}
    plans = [replace(p, peer=built[p.peer.variant]) if p.peer else p for p in plans]
    comparisons = plan_comparisons(scenario, options, described, plans)
    logs = run.logs or Path(tempfile.mkdtemp(prefix=f"lucerna-bench-{scenario.name}-"))
    logs.mkdir(parents=True, exist_ok=True)
    settings = _settings(run, logs, progress)
    started, clock = datetime.now(UTC), time.monotonic()
    progress(f"{scenario.name}: {len(plans)} arms, logs in {logs}")
    head, arms, requests, rounds = trio.run(_run, run, plans, settings, logs, progress)
    summary = {
        "groups": groups(requests, rounds),
        "comparisons": [row for c in comparisons for row in compare(
            c, scenario.phases(options), scenario.cache_scenario, head, requests, rounds)],
        "cold_violations": [r.to_json() for r in
                            cold_violations(requests, scenario.phases(options), head)],
        "warm_misses": [r.to_json() for r in
                        warm_misses(requests, scenario.phases(options), head)],
    }
    return {
        "format": FORMAT,
        "run_id": new_run_id(scenario.name, started),
        "scenario": {"name": scenario.name, "version": scenario.version,
                     "measures": scenario.measures, "workload": scenario.workload,
                     "api": scenario.api, "cache_scenario": scenario.cache_scenario,
                     "phases": [asdict(p) for p in scenario.phases(options)],
                     "levels": sorted({r.level for r in requests})},
        "commit": commit(),
        "machine": machine(backend),
        "started_utc": started.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - clock, 3),
        "argv": list(run.argv),
        "settings": _recorded(run, settings),
        "head_tokens": head,
        "arms": arms,
        "requests": [r.to_json() for r in requests],
        "rounds": [r.to_json() for r in rounds],
        "summary": summary,
    }


def _recorded(run: RunSettings, settings: ServerSettings) -> dict[str, Any]:
    o = run.options
    return {"model": str(o.model), "model_name": run.model_name, "n_ctx": settings.n_ctx,
            "parallel": settings.parallel, "threads": settings.threads,
            "n_gpu_layers": settings.n_gpu_layers, "queue_limit": settings.queue_limit,
            "chat_template": ("lucerna fallback, both servers" if settings.chat_template_file
                              else "the model's"),
            "repeats": o.repeats, "max_tokens": o.max_tokens or run.scenario.max_tokens,
            "prompts": o.prompts, "levels": list(o.levels or run.scenario.levels),
            "scale": o.scale, "seed": run.seed, "draft": str(o.draft) if o.draft else None,
            "draft_block": o.draft_block, "drafter": o.drafter,
            "acceptances": list(o.acceptances) if o.acceptances else None,
            "ngram_types": list(o.ngram_types) if o.ngram_types else None,
            "peers": list(run.peers), "arms_selected": list(run.arms) if run.arms else None}


def _keys(run: RunSettings) -> list[str]:
    """Every key the scenario salts, found by building its rounds once with a recorder."""
    keys: list[str] = []

    def record(key: str) -> str:
        keys.append(key)
        return key

    run.scenario.rounds(run.options, record)
    return keys


async def _run(run: RunSettings, plans: Sequence[ArmPlan], settings: ServerSettings,
               logs: Path, progress: Progress) -> tuple[int, list[dict[str, Any]], Any, Any]:
    scenario, options = run.scenario, run.options
    http = [p for p in plans if p.arm.side != "daemon"]
    async with AsyncExitStack() as stack:
        running = await stack.enter_async_context(open_arms(
            http, settings, run.model_name, scenario.api, logs,
            startup_timeout=run.startup_timeout, progress=progress))
        book = SaltBook(run.seed, running[0].first_token)
        labels = [p.label for p in plans]
        progress(f"drawing salts for {len(labels)} arms")
        await book.fill(labels, [*_keys(run), _WARM_UP_KEY])
        salted = {label: scenario.rounds(options, book.for_arm(label)) for label in labels}
        head = await _head(running, scenario, book)
        by_label: dict[str, RunningArm] = {arm.label: arm for arm in running}
        from daemons.native import ensure_native

        for plan in (p for p in plans if p.arm.side == "daemon"):
            prompts = [request.prompt for round_ in salted[plan.label] for request in round_]
            by_label[plan.label] = await stack.enter_async_context(open_daemon_arm(
                plan, options.model, ensure_native(progress=progress), settings,
                options.draft, prompts, options.max_tokens or scenario.max_tokens,
                progress=progress))
        arms = [by_label[p.label] for p in plans]
        await warm_up(arms, {label: scenario.probe(book.salt(label, _WARM_UP_KEY))
                             for label in labels}, progress)
        requests, rounds = await run_rounds(arms, salted, progress)
        return head, [arm.describe() for arm in arms], requests, rounds
    raise AssertionError("unreachable")  # pragma: no cover


async def _head(running: Sequence[RunningArm], scenario: Scenario, book: SaltBook) -> int:
    """The fixed head, from the first of our arms (or the first arm) as the server sees it."""
    ours = [arm for arm in running if arm.plan.arm.side == "lucerna"] or list(running)
    driver = ours[0].driver
    assert isinstance(driver, HttpDriver)
    salt = book.salt(ours[0].label, _WARM_UP_KEY)
    return await shared_head(driver.client, driver.endpoint, scenario.probe(salt), salt)

