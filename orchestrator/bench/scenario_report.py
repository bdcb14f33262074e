"""A scenario run's document as markdown: the arms, the spreads, the ratios.

Every table names the machine and card, the commit and the run id; the arms table names
each arm's server and build (the peer pristine or patched, its pin and patch series),
its flags and why they are its best. Figures are spreads, ``min / median / max``; a
ratio the fairness rules refuse is printed as the refusal and its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.bench._cells import num

__all__ = ["scenario_markdown"]


def _spread(spread: Mapping[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    if not spread:
        return "-"
    return " / ".join(f"{spread[k] * scale:.{digits}f}" for k in ("min", "median", "max"))


def _server(arm: Mapping[str, Any]) -> str:
    peer = arm.get("peer")
    if peer:
        patches = ("no patches" if peer["patch_series"] == "none"
                   else f"patches {peer['patch_series']}")
        return f"{peer['label']} ({peer['variant']}: {peer['pin']}, {patches})"
    if arm["side"] == "daemon":
        return "our daemon, driven directly (no HTTP)"
    return "lucerna serve"


def _arms(arms: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| arm | server, build | its own flags | why |", "|---|---|---|---|"]
    for arm in arms:
        flags = " ".join(arm["flags"])
        if arm.get("oracle_accept") is not None:
            flags += f" --draft --draft-oracle --oracle-accept={arm['oracle_accept']:g}"
        flags = flags.strip() or "(shared settings only)"
        lines.append(f"| {arm['label']} | {_server(arm)} | `{flags}` | {arm['why']} |")
    return lines


def _groups(groups: Sequence[Mapping[str, Any]], head: int) -> list[str]:
    lines = [f"| phase | conc | arm | ok/n | cached tok (head {head}) | TTFT ms | decode tok/s "
             "| aggregate tok/s | accept len |",
             "|---|---:|---|---:|---|---|---|---|---|"]
    for g in groups:
        lines.append(
            f"| {g['phase']} | {g['level']} | {g['arm']} | {g['requests'] - g['failed']}/"
            f"{g['requests']} | {_spread(g['cached_tokens'], digits=0)} "
            f"| {_spread(g['ttft_s'], 1000)} | {_spread(g['decode_tps'])} "
            f"| {_spread(g['aggregate_tps'])} | {_spread(g['acceptance_length'], digits=2)} |")
    return lines


def _comparisons(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| phase | conc | candidate / baseline | metric | ratio of medians "
             "| paired ratios | what |", "|---|---:|---|---|---:|---|---|"]
    for row in rows:
        better = "higher" if row["higher_is_better"] else "lower"
        pair = f"{row['candidate']} / {row['baseline']}"
        if len(row["baselines"]) > 1:
            pair += f" (best of {', '.join(row['baselines'])})"
        if row["refused"]:
            figures = f"refused: {row['refused']} | -"
        else:
            figures = f"{num(row['ratio'], 3)} | {_spread(row['paired'], digits=3)}"
        lines.append(f"| {row['phase']} | {row['level']} | {pair} | {row['metric']} "
                     f"({better} is better) | {figures} | {row['what']} |")
    return lines


def _invariants(summary: Mapping[str, Any], requests: int, head: int) -> str:
    broken = summary["cold_violations"]
    if broken:
        shown = ", ".join(f"{r['arm']} {r['key']} ({r['cached_tokens']})" for r in broken[:6])
        cold = (f"Cold invariant BROKEN: {len(broken)} cold request(s) read beyond the "
                f"{head}-token head: {shown}.")
    else:
        cold = f"Cold invariant held: no cold request read beyond the {head}-token head."
    misses = summary["warm_misses"]
    warm = (f" Warm phase: {len(misses)} request(s) read nothing from the cache."
            if misses else "")
    return f"{cold}{warm} ({requests} requests in all.)"


def scenario_markdown(doc: Mapping[str, Any]) -> str:
    scenario, machine, commit = doc["scenario"], doc["machine"], doc["commit"]
    sha = (commit.get("sha") or "unknown")[:10] + (" (dirty)" if commit.get("dirty") else "")
    head = doc["head_tokens"]
    peers = sorted({_server(arm) for arm in doc["arms"] if arm.get("peer")})
    caption = (f"On {machine['card']} (backend {machine['backend']}); peer: "
               f"{'; '.join(peers) or 'none'}.")
    lines = [
        f"## {scenario['name']} v{scenario['version']}: {scenario['measures']}",
        "",
        f"Run {doc['run_id']}; {machine['card']}, backend {machine['backend']}, "
        f"{machine['cores']} cores; commit {sha}; model {doc['settings']['model']}.",
        f"Workload: {scenario['workload']}",
        "",
        *_arms(doc["arms"]),
        "",
        caption,
        "",
        *_groups(doc["summary"]["groups"], head),
        "",
        caption,
        "",
        *_comparisons(doc["summary"]["comparisons"]),
        "",
        _invariants(doc["summary"], len(doc["requests"]), head),
        "",
        "Spreads are min / median / max over the requests (TTFT, decode, cached) or the "
        "rounds (aggregate) of each arm; paired ratios are per request key (per round for "
        "aggregate tok/s), each taken against the same key on the other arm.",
        "",
    ]
    return "\n".join(lines)
