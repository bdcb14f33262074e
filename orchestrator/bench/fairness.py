"""When a ratio of two arms means something, and the cold phase's invariant.

A prefix cache turns a prefill into a copy, so a request one server read from its cache
and the other prefilled compares two different jobs. The rules, over the requests of
one phase at one concurrency level (a request *read from its cache* when its server
reported more cached tokens than the run's fixed head, ``head.py``):

- **cold invariant**: no request of a cold phase reads from a cache; one that does is a
  fault of the harness or a server, listed by ``cold_violations``, and refuses every
  ratio of that phase and level;
- **warm expectation**: every request of a warm phase reads from its cache
  (``warm_misses`` lists those that did not);
- **same footing**: outside the cache scenarios (``Scenario.cache_scenario``, where what
  each cache keeps *is* the measurement), a ratio stands only where both arms read from
  their caches for the same requests;
- every request of both arms succeeded and reported its cached tokens.

``refusal`` returns the reason a ratio is refused, in words the report prints, or None.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.bench.scenarios._declare import Phase
from orchestrator.bench.schedule import RequestRecord

__all__ = ["cold_violations", "read_from_cache", "refusal", "warm_misses"]


def read_from_cache(record: RequestRecord, head: int) -> bool:
    return record.cached_tokens is not None and record.cached_tokens > head


def cold_violations(records: Sequence[RequestRecord], phases: Sequence[Phase],
                    head: int) -> list[RequestRecord]:
    """Requests of a cold phase that read from a cache (or did not say whether they did)."""
    cold = {p.name for p in phases if not p.expects_cache}
    return [r for r in records if r.phase in cold and r.ok
            and (r.cached_tokens is None or read_from_cache(r, head))]


def warm_misses(records: Sequence[RequestRecord], phases: Sequence[Phase],
                head: int) -> list[RequestRecord]:
    warm = {p.name for p in phases if p.expects_cache}
    return [r for r in records if r.phase in warm and r.ok and not read_from_cache(r, head)]


def _hits(records: Sequence[RequestRecord], head: int) -> set[str]:
    return {r.key for r in records if read_from_cache(r, head)}


def _problem(label: str, records: Sequence[RequestRecord]) -> str | None:
    if not records:
        return f"{label} has no requests here"
    failed = [r for r in records if not r.ok]
    if failed:
        return f"{len(failed)} of {len(records)} requests to {label} failed ({failed[0].error})"
    silent = [r for r in records if r.cached_tokens is None]
    if silent:
        return (f"{label} did not report its cached tokens for {len(silent)} of "
                f"{len(records)} requests, so whether it read from its cache is unknown")
    return None


def refusal(phase: Phase, cache_scenario: bool, head: int,
            candidate: tuple[str, Sequence[RequestRecord]],
            baseline: tuple[str, Sequence[RequestRecord]]) -> str | None:
    """Why the ratio of ``candidate`` over ``baseline`` must not be printed, or None."""
    for label, records in (candidate, baseline):
        if (problem := _problem(label, records)) is not None:
            return problem
    (a, a_records), (b, b_records) = candidate, baseline
    hits = {a: _hits(a_records, head), b: _hits(b_records, head)}
    if not phase.expects_cache:
        readers = [f"{label} in {len(keys)} of {len(records)}" for (label, records), keys
                   in zip((candidate, baseline), hits.values(), strict=True) if keys]
        if readers:
            return (f"cold phase, yet requests read from a cache beyond the {head}-token "
                    f"head ({', '.join(readers)}): the cold invariant is broken")
        return None
    if cache_scenario or hits[a] == hits[b]:
        return None
    return (f"{a} read from its cache in {len(hits[a])} of {len(a_records)} requests, {b} in "
            f"{len(hits[b])} of {len(b_records)}: one side copied what the other prefilled")
