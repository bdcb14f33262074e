"""NIAH results as a table (stdout), JSON and a PNG heatmap (matplotlib)."""

from __future__ import annotations

import json
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.niah._grid import FULL, Cell

__all__ = ["render_table", "summary", "write_heatmap", "write_json"]


def _keep_label(keep: float) -> str:
    return "full" if keep >= FULL else f"{keep:g}"


def _outcome(cell: Cell) -> str:
    if cell.passed:
        return "pass"
    return "FAIL (dropped)" if cell.needle_kept is False else "FAIL"


def _baseline(cells: Sequence[Cell], cell: Cell) -> Cell | None:
    return next((c for c in cells if not c.compressed and c.length == cell.length
                 and c.depth == cell.depth and c.filler == cell.filler), None)


def _speedup(cells: Sequence[Cell], cell: Cell) -> float | None:
    base = _baseline(cells, cell)
    if base is None or base.ttft_s is None or cell.ttft_s is None or cell.ttft_s <= 0:
        return None
    return base.ttft_s / cell.ttft_s


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summary(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Per keep ratio and length: pass rate, median TTFT, median speedup over full, and
    the median drafter time inside that TTFT (daemon mode; the rest is the target's)."""
    rows = []
    for keep in sorted({c.keep for c in cells}, reverse=True):
        for length in sorted({c.length for c in cells}):
            group = [c for c in cells if c.keep == keep and c.length == length]
            speedups = [s for c in group if (s := _speedup(cells, c)) is not None]
            rows.append({
                "keep": keep, "length": length, "passed": sum(c.passed for c in group),
                "cases": len(group),
                "prompt_tokens": statistics.median(c.prompt_tokens for c in group),
                "ttft_s": _median([c.ttft_s for c in group if c.ttft_s is not None]),
                "speedup": _median(speedups) if keep < FULL else None,
                "compress_s": _median([c.compress_s for c in group
                                       if c.compress_s is not None and c.ttft_s is not None]),
            })
    return rows


def render_table(cells: Sequence[Cell]) -> str:
    """Markdown: one row per cell, then the summary per keep ratio and length."""
    lines = ["| length | depth | keep | prefilled / full tokens | TTFT s | vs full | needle | "
             "answer |", "|---:|---:|---:|---:|---:|---:|:---:|---|"]
    for c in cells:
        speedup = _speedup(cells, c) if c.compressed else None
        answer = (c.error or c.answer.strip().replace("\n", " ").replace("|", "\\|"))[:48]
        lines.append(
            f"| {c.length} | {c.depth:g} | {_keep_label(c.keep)} | {c.prompt_tokens} / "
            f"{c.n_tokens} | {'-' if c.ttft_s is None else f'{c.ttft_s:.2f}'} | "
            f"{'' if speedup is None else f'{speedup:.2f}x'} | "
            f"{_outcome(c)} | {answer} |")
    lines += ["", "| keep | length | passed | median prefilled tokens | median TTFT s | "
              "median speedup | median drafter s |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in summary(cells):
        ttft_text = "-" if row["ttft_s"] is None else f"{row['ttft_s']:.2f}"
        speedup_text = "" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        drafter_text = "" if row["compress_s"] is None else f"{row['compress_s']:.2f}"
        lines.append(f"| {_keep_label(row['keep'])} | {row['length']} | {row['passed']}/"
                     f"{row['cases']} | {row['prompt_tokens']:.0f} | {ttft_text} | "
                     f"{speedup_text} | {drafter_text} |")
    return "\n".join(lines)


def write_json(path: Path, cells: Sequence[Cell], run: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"run": dict(run), "passed": all(c.passed for c in cells),
                "summary": summary(cells), "cells": [c.to_json() for c in cells]}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def write_heatmap(path: Path, cells: Sequence[Cell], title: str) -> None:
    """One panel per keep ratio: depth across, length down; green pass, red fail, with
    each cell's TTFT (and its speedup over the full prompt) written in it, and
    "dropped" where compression lost the needle."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    keeps = sorted({c.keep for c in cells}, reverse=True)
    lengths = sorted({c.length for c in cells})
    depths = sorted({c.depth for c in cells})
    fig, axes = plt.subplots(1, len(keeps), squeeze=False,
                             figsize=(1.1 + 1.0 * len(depths) * len(keeps) + 0.8 * len(keeps),
                                      1.4 + 0.55 * len(lengths)))
    colors = ListedColormap(["#d9534f", "#5cb85c"])
    for ax, keep in zip(axes[0], keeps, strict=True):
        grid = [[float("nan")] * len(depths) for _ in lengths]
        for c in cells:
            if c.keep == keep:
                grid[lengths.index(c.length)][depths.index(c.depth)] = float(c.passed)
        ax.imshow(grid, cmap=colors, vmin=0, vmax=1, aspect="auto")
        for c in cells:
            if c.keep != keep:
                continue
            speedup = _speedup(cells, c) if c.compressed else None
            text = "err" if c.ttft_s is None else f"{c.ttft_s:.1f}s"
            if speedup is not None:
                text += f"\n{speedup:.1f}x"
            if c.needle_kept is False:
                text += "\ndropped"
            ax.text(depths.index(c.depth), lengths.index(c.length), text, ha="center",
                    va="center", fontsize=7, color="white")
        ax.set_title(f"keep {_keep_label(keep)}", fontsize=9)
        ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        ax.set_yticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
        ax.set_xlabel("needle depth", fontsize=8)
    axes[0][0].set_ylabel("context tokens", fontsize=8)
    width_chars = int(fig.get_figwidth() * 16)  # about 16 characters an inch at size 7
    fig.suptitle("\n".join(textwrap.fill(line, width_chars) for line in title.splitlines()),
                 fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
