"""The benchmark's outputs: one JSON document and markdown tables.

The JSON keeps everything (every request's figures, every probe sample) so a
result can be re-read and re-tabulated later; the markdown shows one row per
(target, set, concurrency) and, with two targets, a ratio table: candidate over
baseline per metric, with the direction that is better named in the header. Next
to the ratios of the medians come the medians of the per-pair ratios (each
request and its counterpart on the other target ran back to back, so they saw
the same load on the machine; concurrency 1 only), and the share of prompts both
answered alike. A conversation set (``agent``) adds a table per conversation: each
turn's TTFT, prompt and cached tokens per target (``turns``); ``--disk-restart`` adds
the restart measurement (``restart``).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.bench._cells import mib, ms, num, share
from orchestrator.bench.restart import disk_restart_table
from orchestrator.bench.runner import CaseRun
from orchestrator.bench.stats import QUIET_SHARE, RequestTiming, percentile
from orchestrator.bench.turns import conversation_figures, conversation_tables

__all__ = [
    "QUIET_SHARE",
    "RATIO_METRICS",
    "bench_document",
    "markdown_tables",
    "ratios",
    "write_json",
]

# (summary field, column title, the better direction)
RATIO_METRICS: tuple[tuple[str, str, str], ...] = (
    ("decode_tps_p50", "decode tok/s", "higher"),
    ("ttft_p50_s", "TTFT p50", "lower"),
    ("itl_p50_s", "ITL p50", "lower"),
    ("itl_p99_s", "ITL p99", "lower"),
    ("e2e_p50_s", "e2e p50", "lower"),
    ("throughput_tps", "aggregate tok/s", "higher"),
)


def _host() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"machine": platform.machine(), "system": platform.system(),
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "loadavg_at_end": load}


def ratios(runs: Sequence[CaseRun], candidate: str, baseline: str) -> list[dict[str, Any]]:
    """Per (set, concurrency) both targets ran: candidate / baseline for each metric."""
    by_case = {(r.target, r.set, r.concurrency): r.summary().to_json() for r in runs}
    texts = {(r.target, r.set, r.concurrency): r.timings for r in runs}
    rows = []
    for target, set_name, concurrency in by_case:
        if target != candidate or (baseline, set_name, concurrency) not in by_case:
            continue
        a = by_case[(candidate, set_name, concurrency)]
        b = by_case[(baseline, set_name, concurrency)]
        metrics = {}
        for key, _, _ in RATIO_METRICS:
            if a.get(key) is not None and b.get(key):
                metrics[key] = a[key] / b[key]
        rows.append({"set": set_name, "concurrency": concurrency, "candidate": candidate,
                     "baseline": baseline, "ratios": metrics,
                     # Only concurrency 1 runs the two targets' requests back to back;
                     # concurrent runs come one target after the other, in finishing order.
                     "paired": (_paired(texts[(candidate, set_name, concurrency)],
                                        texts[(baseline, set_name, concurrency)])
                                if concurrency == 1 else None),
                     "same_output": _same_output(texts[(candidate, set_name, concurrency)],
                                                 texts[(baseline, set_name, concurrency)]),
                     "ttft_p50_added_s": (a["ttft_p50_s"] - b["ttft_p50_s"]
                                          if a["ttft_p50_s"] is not None
                                          and b["ttft_p50_s"] is not None else None)})
    return rows


def _paired(a: Sequence[RequestTiming], b: Sequence[RequestTiming]) -> dict[str, float | None]:
    """Medians of per-pair ratios, over all pairs and over the quiet ones.

    A pair is the i-th request of each target: the same prompt, run back to back
    (concurrency 1 interleaves them), so slow drift of the machine falls on both
    halves and cancels in the ratio. A pair is quiet when other programs took less
    than ``QUIET_SHARE`` of the machine during both halves.
    """
    pairs = [(x, y) for x, y in zip(a, b, strict=False)
             if x.ok and y.ok and x.prompt_id == y.prompt_id]
    quiet = [(x, y) for x, y in pairs
             if x.interference is not None and y.interference is not None
             and max(x.interference, y.interference) < QUIET_SHARE]
    out: dict[str, float | None] = {"pairs": len(pairs), "quiet_pairs": len(quiet)}
    for name, chosen in (("", pairs), ("quiet_", quiet)):
        for key in ("decode_tps", "ttft_s"):
            values = [getattr(x, key) / getattr(y, key) for x, y in chosen
                      if getattr(x, key) and getattr(y, key)]
            out[f"{name}{key}_ratio_p50"] = percentile(values, 50)
    return out


def _same_output(a: Sequence[RequestTiming], b: Sequence[RequestTiming]) -> float | None:
    """The share of prompts whose first successful outputs are identical on both targets.

    Under greedy decoding on the same weights both should write the same text; where
    they do not, they did different work and their speeds compare less directly.
    """
    first_a = {t.prompt_id: t.text for t in reversed(a) if t.ok}
    first_b = {t.prompt_id: t.text for t in reversed(b) if t.ok}
    both = first_a.keys() & first_b.keys()
    if not both:
        return None
    return sum(first_a[p] == first_b[p] for p in both) / len(both)


def bench_document(runs: Sequence[CaseRun], *, targets: Sequence[Mapping[str, Any]],
                   settings: Mapping[str, Any], started: float) -> dict[str, Any]:
    """The JSON result: settings, targets, host facts, every run, and ratios."""
    doc: dict[str, Any] = {
        "lucerna_bench": 1,
        "started_unix": started,
        "duration_s": time.time() - started,
        "host": _host(),
        "settings": dict(settings),
        "targets": [dict(t) for t in targets],
        "runs": [r.to_json() for r in runs],
    }
    labels = [t["label"] for t in targets]
    if len(labels) == 2:
        doc["ratios"] = ratios(runs, labels[0], labels[1])
    if conversations := conversation_figures(doc["runs"], labels):
        doc["conversations"] = conversations
    return doc


def _cpu(per_token: Mapping[str, float] | None) -> str:
    if not per_token:
        return "-"
    return f"{per_token['process']:.2f}, {per_token['tree']:.2f}"


def markdown_tables(doc: Mapping[str, Any]) -> str:
    """The results table and, with two targets, the ratio table, as markdown."""
    lines = [
        "| target | set | conc | ok/n | TTFT p50 ms | TTFT p99 ms | decode tok/s | ITL p50 ms "
        "| ITL p99 ms | e2e p50 s | prompt tok | compl tok | accept len | agg tok/s "
        "| /health p99 ms | RSS max MiB | CPU ms/tok (process, tree) | others % |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in doc["runs"]:
        s = run["summary"]
        probe = run.get("probe") or {}
        # Per request at concurrency 1 (the median), over the whole run otherwise.
        others = s["interference_p50"] if run["concurrency"] == 1 else run.get("interference")
        lines.append(
            f"| {run['target']} | {run['set']} | {run['concurrency']} "
            f"| {s['requests'] - s['failed']}/{s['requests']} "
            f"| {ms(s['ttft_p50_s'])} | {ms(s['ttft_p99_s'])} | {num(s['decode_tps_p50'])} "
            f"| {ms(s['itl_p50_s'])} | {ms(s['itl_p99_s'])} | {num(s['e2e_p50_s'], 2)} "
            f"| {num(s['prompt_tokens_mean'], 0)} | {num(s['completion_tokens_mean'], 0)} "
            f"| {num(s['acceptance_length_mean'], 2)} | {num(s['throughput_tps'])} "
            f"| {ms(probe.get('health_p99_s'))} | {mib(probe.get('rss_max_bytes'))} "
            f"| {_cpu(run.get('cpu_ms_per_token'))} | {share(others)} |")
    out = "\n".join(lines) if doc["runs"] else ""
    rows = doc.get("ratios") or []
    if rows:
        header = " | ".join(f"{title} ({better} is better)" for _, title, better in RATIO_METRICS)
        ratio_lines = [
            f"\n{rows[0]['candidate']} / {rows[0]['baseline']}:\n",
            f"| set | conc | {header} | added TTFT p50 ms | paired decode | paired TTFT "
            "| quiet pairs: decode | quiet pairs: TTFT | quiet/all pairs | same output |",
            "|---|---:|" + "---:|" * (len(RATIO_METRICS) + 7),
        ]
        for row in rows:
            cells = " | ".join(num(row["ratios"].get(key), 3) for key, _, _ in RATIO_METRICS)
            paired = row["paired"] or {}
            counts = f"{paired['quiet_pairs']}/{paired['pairs']}" if paired else "-"
            ratio_lines.append(
                f"| {row['set']} | {row['concurrency']} | {cells} "
                f"| {ms(row['ttft_p50_added_s'])} "
                f"| {num(paired.get('decode_tps_ratio_p50'), 3)} "
                f"| {num(paired.get('ttft_s_ratio_p50'), 3)} "
                f"| {num(paired.get('quiet_decode_tps_ratio_p50'), 3)} "
                f"| {num(paired.get('quiet_ttft_s_ratio_p50'), 3)} "
                f"| {counts} | {num(row['same_output'], 2)} |")
        out += "\n" + "\n".join(ratio_lines)
    out += "\n" + conversation_tables(doc.get("conversations") or [])
    if doc.get("disk_restart"):
        out += disk_restart_table(doc["disk_restart"])
    return out


def write_json(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
