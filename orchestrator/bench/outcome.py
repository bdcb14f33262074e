"""A scenario run's figures: spreads per arm, ratios per comparison, refusals.

Every figure is a spread (``Spread``: n, min, median, max), never one number:

- per request: ``ttft_s``, ``decode_tps``, ``e2e_s``, ``cached_tokens``,
  ``acceptance_length``;
- per round: ``aggregate_tps`` (the round's completion tokens over its wall time);
- per repeat: ``ttft_sum_s`` (a conversation's TTFTs added up).

A comparison row gives, per phase and concurrency level, the ratio of the two medians
and the spread of the paired ratios (each request over the same key's request on the
other arm; each round over the same round, for ``aggregate_tps``; each repeat over
the same repeat, for ``ttft_sum_s``); the phase ``all`` takes every phase's requests;
or, instead of a ratio, the reason ``fairness.refusal`` gives. Where the baseline is
several arms (the peer's n-gram types), the one with the best median stands.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.bench.fairness import refusal
from orchestrator.bench.scenarios._declare import Comparison, Metric, Phase
from orchestrator.bench.schedule import RequestRecord, RoundRecord

__all__ = ["ALL", "HIGHER_IS_BETTER", "Spread", "compare", "groups"]

HIGHER_IS_BETTER: dict[str, bool] = {"decode_tps": True, "aggregate_tps": True,
                                     "ttft_s": False, "e2e_s": False, "ttft_sum_s": False}
ALL = Phase("all", True, "every phase's requests together")
_REQUEST_FIGURES = ("ttft_s", "decode_tps", "e2e_s", "cached_tokens", "acceptance_length")


@dataclass(frozen=True)
class Spread:
    n: int
    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float | int | None]) -> Spread | None:
        present = [float(v) for v in values if v is not None]
        if not present:
            return None
        return cls(len(present), min(present), statistics.median(present), max(present))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _key(arm: str, phase: str, level: int) -> tuple[str, str, int]:
    return (arm, phase, level)


def groups(requests: Sequence[RequestRecord],
           rounds: Sequence[RoundRecord]) -> list[dict[str, Any]]:
    """One entry per (arm, phase, level), in the order the requests came."""
    order: dict[tuple[str, str, int], None] = {}
    for r in requests:
        order.setdefault(_key(r.arm, r.phase, r.level), None)
    out = []
    for arm, phase, level in order:
        mine = [r for r in requests if _key(r.arm, r.phase, r.level) == (arm, phase, level)]
        good = [r for r in mine if r.ok]
        entry: dict[str, Any] = {"arm": arm, "phase": phase, "level": level,
                                 "requests": len(mine), "failed": len(mine) - len(good)}
        for figure in _REQUEST_FIGURES:
            spread = Spread.of(getattr(r, figure) for r in good)
            entry[figure] = spread.to_json() if spread else None
        aggregate = Spread.of(r.aggregate_tps for r in rounds
                              if _key(r.arm, r.phase, r.level) == (arm, phase, level))
        entry["aggregate_tps"] = aggregate.to_json() if aggregate else None
        out.append(entry)
    return out


def _in(phase: str, wanted: str) -> bool:
    return wanted == ALL.name or phase == wanted


def _values(metric: Metric, arm: str, phase: str, level: int,
            requests: Sequence[RequestRecord],
            rounds: Sequence[RoundRecord]) -> dict[str, float]:
    """The metric per pairing key: the request's key, the round's index, the repeat."""
    if metric == "aggregate_tps":
        return {str(r.index): v for r in rounds
                if r.arm == arm and _in(r.phase, phase) and r.level == level
                and (v := r.aggregate_tps) is not None}
    mine = [r for r in requests
            if r.arm == arm and _in(r.phase, phase) and r.level == level and r.ok]
    if metric == "ttft_sum_s":
        sums: dict[str, float] = {}
        for r in mine:
            if r.ttft_s is not None:
                sums[str(r.repeat)] = sums.get(str(r.repeat), 0.0) + r.ttft_s
        return sums
    return {r.key: float(v) for r in mine if (v := getattr(r, metric)) is not None}


def _best(metric: Metric, candidates: Mapping[str, dict[str, float]]) -> str | None:
    scored = {label: statistics.median(v.values()) for label, v in candidates.items() if v}
    if not scored:
        return None
    pick = max if HIGHER_IS_BETTER[metric] else min
    return pick(scored, key=lambda label: scored[label])


def compare(comparison: Comparison, phases: Sequence[Phase], cache_scenario: bool,
            head: int, requests: Sequence[RequestRecord],
            rounds: Sequence[RoundRecord]) -> list[dict[str, Any]]:
    """The comparison's rows: one per phase it names and level both arms ran."""
    rows = []
    by_name = {p.name: p for p in (*phases, ALL)}
    levels = sorted({r.level for r in requests if r.arm == comparison.candidate})
    for phase_name in comparison.phases:
        phase = by_name.get(phase_name)
        if phase is None:
            continue
        for level in levels:
            if comparison.levels is not None and level not in comparison.levels:
                continue
            rows.append(_row(comparison, phase, level, cache_scenario, head, requests, rounds))
    return rows


def _row(comparison: Comparison, phase: Phase, level: int, cache_scenario: bool, head: int,
         requests: Sequence[RequestRecord], rounds: Sequence[RoundRecord]) -> dict[str, Any]:
    metric = comparison.metric
    cand = comparison.candidate
    values = {label: _values(metric, label, phase.name, level, requests, rounds)
              for label in (cand, *comparison.baseline)}
    base = _best(metric, {b: values[b] for b in comparison.baseline}) or comparison.baseline[0]
    row: dict[str, Any] = {"what": comparison.what, "candidate": cand, "baseline": base,
                           "baselines": list(comparison.baseline), "metric": metric,
                           "higher_is_better": HIGHER_IS_BETTER[metric],
                           "phase": phase.name, "level": level, "ratio": None,
                           "paired": None, "refused": None}

    def of(label: str) -> list[RequestRecord]:
        return [r for r in requests
                if r.arm == label and _in(r.phase, phase.name) and r.level == level]

    row["refused"] = refusal(phase, cache_scenario, head, (cand, of(cand)), (base, of(base)))
    if row["refused"] is not None:
        return row
    a, b = values[cand], values[base]
    if not a or not b:
        row["refused"] = f"no {metric} figures for {cand if not a else base}"
        return row
    row["ratio"] = statistics.median(a.values()) / statistics.median(b.values())
    paired = Spread.of(a[k] / b[k] for k in a.keys() & b.keys() if b[k])
    row["paired"] = paired.to_json() if paired else None
    return row
