"""The figures of one request and of a group of them: percentiles, rates, summaries.

A ``RequestTiming`` is what the streaming client saw of one request: when it was
sent, when each non-empty piece of output arrived, and what the usage chunk said.
Everything the report shows is derived from those instants here, in one place, so
the HTTP client and the direct daemon driver are measured by the same rules:

- TTFT: first non-empty output minus the moment the request was sent.
- ITL: the gaps between consecutive non-empty outputs.
- decode tok/s: ``(completion_tokens - 1) / (t_last - t_first)``; the first token
  belongs to TTFT (prefill), the rest were decoded in the span that follows.
- e2e: the end of the stream minus the moment the request was sent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["QUIET_SHARE", "RequestTiming", "Summary", "percentile", "summarize"]

# A request ran undisturbed when other programs took less than this share of the
# machine's CPU meanwhile (10% of two cores is a fifth of one).
QUIET_SHARE = 0.10


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated; None if empty.

    Linear interpolation between closest ranks (numpy's default), so p50 of an even
    count is the mean of the middle two and p99 of a short list leans on its maximum.
    """
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class RequestTiming:
    """One request as the client saw it. Times are ``time.perf_counter()`` seconds."""

    prompt_id: str
    t_sent: float
    output_times: list[float] = field(default_factory=list)
    """When each non-empty piece of output (a content delta, or a token) arrived."""
    t_done: float | None = None
    text: str = ""
    """The output, to check that targets given the same prompt did the same work."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens the server reused from its prefix cache (None: not reported)."""
    finish_reason: str | None = None
    acceptance_length: float | None = None
    speculative: dict[str, Any] | None = None
    """The raw speculative-decoding figures the server reported, if any."""
    error: str | None = None
    interference: float | None = None
    """Share of the machine's CPU other programs used meanwhile (``interference.py``)."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.output_times) and self.t_done is not None

    @property
    def ttft_s(self) -> float | None:
        return self.output_times[0] - self.t_sent if self.output_times else None

    @property
    def e2e_s(self) -> float | None:
        return None if self.t_done is None else self.t_done - self.t_sent

    @property
    def itl_s(self) -> list[float]:
        times = self.output_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def decode_tps(self) -> float | None:
        """Tokens per second after the first; None when fewer than two tokens came."""
        n = self.completion_tokens
        if n is None or n < 2 or len(self.output_times) < 2:
            return None
        span = self.output_times[-1] - self.output_times[0]
        return (n - 1) / span if span > 0 else None

    def to_json(self) -> dict[str, Any]:
        itl = self.itl_s
        return {
            "prompt_id": self.prompt_id,
            "ok": self.ok,
            "error": self.error,
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "decode_tps": self.decode_tps,
            "itl_p50_s": percentile(itl, 50),
            "itl_p99_s": percentile(itl, 99),
            "n_outputs": len(self.output_times),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "finish_reason": self.finish_reason,
            "text": self.text,
            "acceptance_length": self.acceptance_length,
            "speculative": self.speculative,
            "interference": self.interference,
        }


@dataclass(frozen=True)
class Summary:
    """A group of requests (one endpoint, one prompt set, one concurrency)."""

    requests: int
    failed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    decode_tps_p50: float | None
    decode_tps_mean: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    prompt_tokens_mean: float | None
    completion_tokens_mean: float | None
    acceptance_length_mean: float | None
    interference_p50: float | None = None
    """Median share of the machine other programs took while a request ran."""
    wall_s: float | None = None
    """First request sent to last one done (concurrent runs)."""
    throughput_tps: float | None = None
    """All completion tokens over ``wall_s``: what the server delivered in aggregate."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(timings: Iterable[RequestTiming], wall_s: float | None = None) -> Summary:
    """Percentiles over the successful requests; ITLs are pooled across requests."""
    all_timings = list(timings)
    good = [t for t in all_timings if t.ok]

    def present(values: Iterable[float | None]) -> list[float]:
        return [v for v in values if v is not None]

    ttft = present(t.ttft_s for t in good)
    tps = present(t.decode_tps for t in good)
    e2e = present(t.e2e_s for t in good)
    itl = [gap for t in good for gap in t.itl_s]
    completion = present(float(t.completion_tokens) if t.completion_tokens is not None else None
                         for t in good)
    throughput = None
    if wall_s and completion:
        throughput = sum(completion) / wall_s
    return Summary(
        requests=len(all_timings),
        failed=len(all_timings) - len(good),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p99_s=percentile(ttft, 99),
        decode_tps_p50=percentile(tps, 50),
        decode_tps_mean=_mean(tps),
        itl_p50_s=percentile(itl, 50),
        itl_p99_s=percentile(itl, 99),
        e2e_p50_s=percentile(e2e, 50),
        e2e_p99_s=percentile(e2e, 99),
        prompt_tokens_mean=_mean(present(
            float(t.prompt_tokens) if t.prompt_tokens is not None else None for t in good)),
        completion_tokens_mean=_mean(completion),
        acceptance_length_mean=_mean(present(t.acceptance_length for t in good)),
        interference_p50=percentile(present(t.interference for t in good), 50),
        wall_s=wall_s,
        throughput_tps=throughput,
    )
