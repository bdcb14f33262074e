"""The NIAH grid: every (length, depth) case, answered in full and at every keep ratio.

Cases run one after the other, and for each case the full prompt first, then each
keep ratio, so a compressed answer's TTFT is measured next to its own baseline under
the same machine load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from daemons.errors import DaemonError
from orchestrator.niah._backends import Backend
from orchestrator.niah._haystack import Filler, build_case, needle_found

__all__ = ["FULL", "Cell", "run_grid"]

FULL = 1.0
"""The keep ratio recorded for a full (uncompressed) prompt."""


@dataclass(frozen=True)
class Cell:
    filler: str
    length: int
    depth: float
    keep: float
    """``FULL`` (1.0) for the uncompressed baseline."""
    n_tokens: int
    """The full prompt's length in the target's tokens."""
    prompt_tokens: int
    """What the target prefilled (fewer when compressed)."""
    value: str
    answer: str
    passed: bool
    ttft_s: float | None
    total_s: float | None
    compress_s: float | None = None
    needle_kept: bool | None = None
    """Whether the needle's number survived compression (daemon mode; None: unknown)."""
    error: str | None = None

    @property
    def compressed(self) -> bool:
        return self.keep < FULL

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_grid(backend: Backend, filler: Filler, lengths: Sequence[int],
                   depths: Sequence[float], keeps: Sequence[float], *, baseline: bool,
                   max_tokens: int, seed: str,
                   progress: Callable[[str], None]) -> list[Cell]:
    cells: list[Cell] = []
    plan: list[float | None] = [None] if baseline else []
    plan += [k for k in keeps if k < FULL]
    total = len(lengths) * len(depths) * len(plan)
    started = time.perf_counter()
    for length in lengths:
        for depth in depths:
            case = await build_case(filler, length, depth, backend.count, seed=seed)
            for keep in plan:
                label = "full" if keep is None else f"keep {keep:g}"
                try:
                    answer = await backend.answer(case.messages, keep, max_tokens)
                except (DaemonError, RuntimeError, OSError) as exc:
                    cell = Cell(filler.name, length, depth, FULL if keep is None else keep,
                                case.n_tokens, 0, case.value, "", False, None, None,
                                error=f"{type(exc).__name__}: {exc}")
                else:
                    cell = Cell(filler.name, length, depth, FULL if keep is None else keep,
                                case.n_tokens, answer.prompt_tokens, case.value, answer.text,
                                needle_found(answer.text, case.value), answer.ttft_s,
                                answer.total_s, answer.compress_s,
                                None if answer.kept_text is None
                                else needle_found(answer.kept_text, case.value))
                cells.append(cell)
                outcome = "PASS" if cell.passed else (
                    "FAIL, needle dropped" if cell.needle_kept is False else "FAIL")
                detail = (cell.error or f"{cell.prompt_tokens}/{cell.n_tokens} tokens, TTFT "
                          f"{cell.ttft_s:.2f} s, answer {cell.answer.strip()[:40]!r}")
                progress(f"[{len(cells)}/{total}, {time.perf_counter() - started:.0f} s] "
                         f"{length} tokens, depth {depth:g}, {label}: {outcome} ({detail})")
    return cells
