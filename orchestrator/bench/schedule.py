"""Rounds sent to the arms in alternating order, each request recorded.

Round ``i`` goes to every arm, one arm after another, never two at once, in an order
rotated by ``i`` (A B, B A, A B ... for two arms; A B C, B C A, C A B ... for three):
drift of the machine (thermal, neighbours) falls on every arm alike, and no arm always
goes first. A round's requests are sent together (one at concurrency 1, N at N), and
its wall time, first sent to last done, gives the aggregate rate.

Every request becomes a ``RequestRecord``: its arm, phase, level, repeat, round and key
(the key is the same on every arm: the pair a paired ratio is taken over), the cached
tokens its server reported, and its timings by the rules of ``stats``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import trio

from orchestrator.bench.arms import RunningArm
from orchestrator.bench.interference import InterferenceMeter
from orchestrator.bench.scenarios._declare import BenchRequest, Round
from orchestrator.bench.servers import BenchServerError
from orchestrator.bench.stats import RequestTiming

__all__ = ["RequestRecord", "RoundRecord", "run_rounds", "warm_up"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RequestRecord:
    arm: str
    phase: str
    level: int
    repeat: int
    round: int
    key: str
    ok: bool
    error: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    decode_tps: float | None
    e2e_s: float | None
    acceptance_length: float | None
    finish_reason: str | None

    @classmethod
    def of(cls, arm: str, index: int, request: BenchRequest,
           timing: RequestTiming) -> RequestRecord:
        return cls(arm=arm, phase=request.phase, level=request.level, repeat=request.repeat,
                   round=index, key=request.key, ok=timing.ok, error=timing.error,
                   prompt_tokens=timing.prompt_tokens, cached_tokens=timing.cached_tokens,
                   completion_tokens=timing.completion_tokens, ttft_s=timing.ttft_s,
                   decode_tps=timing.decode_tps, e2e_s=timing.e2e_s,
                   acceptance_length=timing.acceptance_length,
                   finish_reason=timing.finish_reason)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundRecord:
    arm: str
    index: int
    phase: str
    level: int
    repeat: int
    wall_s: float
    completion_tokens: int
    others: float | None
    """Share of the machine's CPU other programs took during the round."""

    @property
    def aggregate_tps(self) -> float | None:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "aggregate_tps": self.aggregate_tps}


async def _send(arm: RunningArm, round_: Round) -> list[RequestTiming]:
    timings: list[RequestTiming | None] = [None] * len(round_)

    async def one(i: int, request: BenchRequest) -> None:
        timings[i] = await arm.driver.run(request.prompt, request.max_tokens)

    async with trio.open_nursery() as nursery:
        for i, request in enumerate(round_):
            nursery.start_soon(one, i, request)
    return [t for t in timings if t is not None]


def _describe(arm: str, round_: Round, timings: Sequence[RequestTiming], wall: float) -> str:
    first = round_[0]
    failed = [t.error for t in timings if not t.ok]
    cached = [t.cached_tokens for t in timings]
    if failed:
        return f"{arm} {first.phase} {first.key}: FAILED {failed[0]}"
    ttft = sorted(t.ttft_s or 0.0 for t in timings)[len(timings) // 2]
    tokens = sum(t.completion_tokens or 0 for t in timings)
    return (f"{arm} {first.phase} x{len(round_)} {first.key}: ttft {ttft * 1000:.0f} ms, "
            f"{tokens / wall:.1f} tok/s in all, cached {cached}")


async def run_rounds(arms: Sequence[RunningArm], rounds: Mapping[str, Sequence[Round]],
                     progress: Progress) -> tuple[list[RequestRecord], list[RoundRecord]]:
    """Every round on every arm, alternating; the records of all of them."""
    counts = {len(r) for r in rounds.values()}
    if len(counts) != 1:
        raise ValueError(f"the arms have different numbers of rounds: {sorted(counts)}")
    (n,) = counts
    requests: list[RequestRecord] = []
    summary: list[RoundRecord] = []
    meter = InterferenceMeter(arm.pid for arm in arms)
    for index in range(n):
        shift = index % len(arms)
        for arm in [*arms[shift:], *arms[:shift]]:
            round_ = rounds[arm.label][index]
            meter.start()
            started = time.perf_counter()
            timings = await _send(arm, round_)
            wall = time.perf_counter() - started
            others = meter.stop()
            requests += [RequestRecord.of(arm.label, index, request, timing)
                         for request, timing in zip(round_, timings, strict=True)]
            first = round_[0]
            summary.append(RoundRecord(arm.label, index, first.phase, first.level,
                                       first.repeat, wall,
                                       sum(t.completion_tokens or 0 for t in timings if t.ok),
                                       others))
            progress(f"  [{index + 1}/{n}] {_describe(arm.label, round_, timings, wall)}")
    return requests, summary


async def warm_up(arms: Sequence[RunningArm], prompts: Mapping[str, Any],
                  progress: Progress) -> None:
    """One short request per arm, unrecorded, opened by a salt of its own: first-use
    allocations (and graph captures) happen here, not in round 0."""
    for arm in arms:
        timing = await arm.driver.run(prompts[arm.label], 2)
        if not timing.ok:
            raise BenchServerError(f"{arm.label}'s warm-up request failed: {timing.error}")
        progress(f"{arm.label}: warmed up")
