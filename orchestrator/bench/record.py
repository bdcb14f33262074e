"""The result of one scenario run: one compact JSON document, its format stable.

``lucerna bench <scenario> --out FILE`` writes it (one line, no indentation). A results
store keeps such files under their ``run_id`` and indexes them by the fields below;
the format's version is ``format``, raised on any change a reader must know of.

Format ``lucerna-bench-run/1``::

    format        "lucerna-bench-run/1"
    run_id        "<UTC yyyymmddThhmmssZ>-<scenario>-<6 hex>", unique per run
    scenario      {name, version, measures, workload, api, cache_scenario,
                   phases: [{name, expects_cache, what}], levels: [int]}
    commit        {sha, dirty}: the checkout the harness and Lucerna ran from
    machine       {host, system, machine, cpu, cores, memory_gib, backend,
                   cards: [str], card: the one line every table names, loadavg}
    started_utc   ISO 8601; duration_s
    argv          the benchmark's own command line
    settings      {model, model_name, n_ctx, parallel, threads, n_gpu_layers, repeats,
                   max_tokens, levels, seed, scale, draft, ...}: what every arm shares
    head_tokens   the fixed head every prompt shares (head.py)
    arms          [{label, side: lucerna|peer|daemon, argv, flags, why, body,
                    oracle_accept, peer: null | {label, variant: pristine|patched, pin,
                    sha256, backend, patch_series, patches, cmake_args, binary}}]
    requests      [{arm, phase, level, repeat, round, key, ok, error, prompt_tokens,
                    cached_tokens, completion_tokens, ttft_s, decode_tps, e2e_s,
                    acceptance_length, finish_reason}]
    rounds        [{arm, index, phase, level, repeat, wall_s, completion_tokens,
                    others, aggregate_tps}]
    summary       {groups: [{arm, phase, level, requests, failed, ttft_s, decode_tps,
                             e2e_s, cached_tokens, acceptance_length, aggregate_tps}]
                             (each figure a spread {n, min, median, max} or null),
                   comparisons: [{what, candidate, baseline, baselines, metric,
                                  higher_is_better, phase, level, ratio, paired,
                                  refused}],
                   cold_violations: [request], warm_misses: [request]}

Times are seconds, rates tokens per second. A request's ``key`` is the same on every
arm; ``round`` indexes ``rounds`` (the same round index on every arm holds the same keys).
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
from collections.abc import Mapping
from typing import Any

__all__ = ["FORMAT", "new_run_id", "write_document"]

FORMAT = "lucerna-bench-run/1"


def new_run_id(scenario: str, now: datetime.datetime | None = None) -> str:
    moment = now or datetime.datetime.now(datetime.UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{scenario}-{secrets.token_hex(3)}"


def write_document(document: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")
