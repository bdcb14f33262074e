"""Per-turn figures of a conversation set (``agent``): what a prefix cache saves.

Works on the JSON document's runs (so a saved result can be re-tabulated). Requests
whose ids read ``c<conversation>.t<turn>`` are turns; for every conversation and target:

- each turn's TTFT, prompt tokens and the cached tokens the server reported, and the
  new tokens (prompt minus cached) it had to prefill;
- the sum of the TTFTs over the conversation, and over turns 2 on (where a cache can
  help; turn 1 is cold on every target), and with two targets their ratios (candidate
  / baseline) and each turn's;
- the share of the machine other programs took during each turn (``interference.py``),
  and how many turns ran quiet on every target (under ``QUIET_SHARE``);
- from turn 2 on, TTFT over an *estimate* of the time to prefill only the new tokens:
  new tokens divided by the cold turn 1's prefill rate (turn 1's new tokens over its
  TTFT). 1.0 means the turn cost no more than its new tokens would at turn 1's rate;
  the rate falls as the context grows, so a long conversation drifts above 1 even
  with a perfect cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.bench._cells import count, ms, num, share
from orchestrator.bench.stats import QUIET_SHARE

__all__ = ["conversation_figures", "conversation_tables"]

_TURN_ID = re.compile(r"c(\d+)\.t(\d+)")


def _new_tokens(request: Mapping[str, Any]) -> int | None:
    prompt = request.get("prompt_tokens")
    if prompt is None:
        return None
    return int(prompt) - int(request.get("cached_tokens") or 0)


def _target_turns(requests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One target's turns of one conversation, in turn order."""
    turns = sorted(requests, key=lambda r: r["turn"])
    first = turns[0]
    first_new = _new_tokens(first)
    rate = None
    if first["turn"] == 1 and first["ok"] and first_new and first["ttft_s"]:
        rate = first_new / first["ttft_s"]
    rows = []
    for r in turns:
        new = _new_tokens(r) if r["ok"] else None
        estimate = new / rate if rate and new is not None and r["turn"] > 1 else None
        rows.append({
            "turn": r["turn"], "ok": r["ok"], "ttft_s": r["ttft_s"] if r["ok"] else None,
            "prompt_tokens": r["prompt_tokens"], "cached_tokens": r.get("cached_tokens"),
            "new_tokens": new, "new_prefill_estimate_s": estimate,
            "interference": r.get("interference"),
            "ttft_over_estimate": (r["ttft_s"] / estimate
                                   if estimate and r["ok"] and r["ttft_s"] else None),
        })
    over = [row["ttft_over_estimate"] for row in rows if row["ttft_over_estimate"] is not None]
    all_ok = all(row["ok"] for row in rows)
    return {
        "turns": rows,
        "sum_ttft_s": sum(row["ttft_s"] for row in rows) if all_ok else None,
        "sum_ttft_after_turn_1_s": (sum(row["ttft_s"] for row in rows if row["turn"] > 1)
                                    if all_ok else None),
        "cold_prefill_tps": rate,
        "ttft_over_estimate_max": max(over, default=None),
        "ttft_over_estimate_mean": sum(over) / len(over) if over else None,
    }


def conversation_figures(runs: Sequence[Mapping[str, Any]],
                         labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per (set, conversation): each target's turns, sums, and candidate/baseline ratios
    (``labels[0]`` over ``labels[1]``) when there are two targets."""
    found: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
    for run in runs:
        if run["concurrency"] != 1:
            continue
        for request in run["requests"]:
            match = _TURN_ID.fullmatch(request["prompt_id"])
            if match is None:
                continue
            key = (run["set"], int(match[1]))
            found.setdefault(key, {}).setdefault(run["target"], []).append(
                {**request, "turn": int(match[2])})
    out = []
    for (set_name, conversation), by_target in found.items():
        targets = {label: _target_turns(by_target[label]) for label in labels
                   if label in by_target}
        entry: dict[str, Any] = {"set": set_name, "conversation": conversation,
                                 "targets": targets}
        rows = [t["turns"] for t in targets.values()]
        entry["quiet_turns"] = sum(
            all(row.get("interference") is not None and row["interference"] < QUIET_SHARE
                for row in same_turn)
            for same_turn in zip(*rows, strict=False))
        if len(labels) == 2 and all(label in targets for label in labels):
            a, b = (targets[label] for label in labels)
            entry["candidate"], entry["baseline"] = labels
            for total in ("sum_ttft_s", "sum_ttft_after_turn_1_s"):
                entry[total.removesuffix("_s") + "_ratio"] = (
                    a[total] / b[total] if a[total] and b[total] else None)
            entry["ttft_ratios"] = [
                x["ttft_s"] / y["ttft_s"] if x["ttft_s"] and y["ttft_s"] else None
                for x, y in zip(a["turns"], b["turns"], strict=False)]
        out.append(entry)
    return out


def conversation_tables(conversations: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table per conversation, with its sums and the estimate's definition."""
    if not conversations:
        return ""
    parts = []
    for conv in conversations:
        labels = list(conv["targets"])
        targets = [conv["targets"][label] for label in labels]
        ratios = conv.get("ttft_ratios")
        head = " | ".join(f"{label} TTFT ms" for label in labels)
        tail = " | ".join(f"{label} TTFT / new-token est." for label in labels)
        ratio_head = f" | {labels[0]}/{labels[1]} |" if ratios is not None else " |"
        lines = [
            f"\n{conv['set']}, conversation {conv['conversation']}: per turn\n",
            f"| turn | {head}{ratio_head} prompt tok | cached tok | {tail} | others % |",
            "|---:|" + "---:|" * (len(labels) * 2 + 3 + (ratios is not None)),
        ]
        for i, first in enumerate(targets[0]["turns"]):
            rows = [t["turns"][i] if i < len(t["turns"]) else {} for t in targets]
            ttfts = " | ".join(ms(r.get("ttft_s"), 0) for r in rows)
            ratio = f" | {num(ratios[i], 2)} |" if ratios is not None else " |"
            prompt = " / ".join(count(r.get("prompt_tokens")) for r in rows)
            cached = " / ".join(count(r.get("cached_tokens")) for r in rows)
            over = " | ".join(num(r.get("ttft_over_estimate"), 2) for r in rows)
            others = " / ".join(share(r.get("interference")) for r in rows)
            lines.append(f"| {first['turn']} | {ttfts}{ratio} {prompt} | {cached} | {over} "
                         f"| {others} |")
        sums = ", ".join(
            f"{label} {num(t['sum_ttft_s'], 2)} s" for label, t in zip(labels, targets,
                                                                    strict=True))
        later = ", ".join(
            f"{label} {num(t['sum_ttft_after_turn_1_s'], 2)} s"
            for label, t in zip(labels, targets, strict=True))
        ratio_text = later_ratio = ""
        if ratios is not None:
            ratio_text = f"; {labels[0]}/{labels[1]} {num(conv.get('sum_ttft_ratio'), 3)}"
            later_ratio = f"; {num(conv.get('sum_ttft_after_turn_1_ratio'), 3)}"
        rates = ", ".join(f"{label} {num(t['cold_prefill_tps'], 0)} tok/s"
                          for label, t in zip(labels, targets, strict=True))
        lines.append(f"\nSum of TTFTs: {sums}{ratio_text}. Turns 2 on: {later}{later_ratio}. "
                     f"Turn 1 prefill rate: {rates}. "
                     f"Quiet turns (others under {QUIET_SHARE:.0%} on every target): "
                     f"{conv['quiet_turns']}/{len(targets[0]['turns'])}.")
        parts.append("\n".join(lines))
    note = ("\nprompt tok, cached tok and others % (the share of the machine other programs "
            "took meanwhile): per target, in column order. "
            "TTFT / new-token est.: the turn's TTFT over an estimate of the time to prefill "
            "only its new (uncached) tokens, at the cold turn 1's rate (its new tokens / its "
            "TTFT); an estimate, not a measured prefill.\n")
    return "\n".join(parts) + "\n" + note
