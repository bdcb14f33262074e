"""Read a GPU activity trace and say where each forward step's time goes (issue 14).

The trace is native/profiler/kernel_trace.cpp's: one tab-separated line per kernel,
memcpy or memset (``kind start_ns end_ns stream graph bytes name``). A *step* is one
forward of a model: everything the GPU ran up to and including the copy that brings
its logits to the host. Every forward ends with one where the daemon runs with
``LLAMA_LOGITS_ON_DEMAND=0``, as ``bin/gpu-kernel-profile`` starts it; engine patch 0212
otherwise copies only the rows a pick or a record reads.
Steps of one kind (a 1-token decode, a 16-token verify, a draft forward) run the same
kernels, so steps are grouped by how many logits rows they copied and how many kernels
they ran, and each group is summarised by its median step:

- kernels per step, the step's span (its first activity's start to its last's end),
  the GPU's busy time in it (the union of its activities), and the gaps (span - busy);
- the host time before the step (from the previous step's end: sampling, the next
  graph's build, the launch);
- time per kernel class (the kernel's name without its template arguments).

Pure functions over the text; ``bin/gpu-kernel-profile`` records the traces on the GPU.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Activity", "Step", "kernel_class", "parse_trace", "split_steps", "summarise"]

_MIN_LOGITS_COPY_BYTES = 64 * 1024  # a logits row of any real vocabulary is larger


@dataclass(frozen=True)
class Activity:
    kind: str  # kernel, memcpy or memset
    start_ns: int
    end_ns: int
    stream: int
    graph: int  # the CUDA graph it ran in; 0: launched directly
    bytes: int
    name: str

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Step:
    activities: list[Activity] = field(default_factory=list)
    host_gap_ns: int | None = None  # from the previous step's end to this one's start
    logits_rows: int = 0

    @property
    def kernels(self) -> list[Activity]:
        return [a for a in self.activities if a.kind == "kernel"]

    @property
    def span_ns(self) -> int:
        return max(a.end_ns for a in self.activities) - self.activities[0].start_ns

    @property
    def busy_ns(self) -> int:
        """Time at least one activity ran: overlapping ones count once."""
        busy, covered_to = 0, self.activities[0].start_ns
        for activity in sorted(self.activities, key=lambda a: a.start_ns):
            start = max(activity.start_ns, covered_to)
            if activity.end_ns > start:
                busy += activity.end_ns - start
                covered_to = activity.end_ns
        return busy


def parse_trace(lines: Iterable[str]) -> list[Activity]:
    """The activities of a trace, in start order; lines cut short at the end are skipped."""
    activities = []
    for line in lines:
        parts = line.rstrip("\n").split("\t", 6)
        if len(parts) != 7:
            continue  # the last line of a process killed mid-write
        kind, start, end, stream, graph, size, name = parts
        activities.append(Activity(kind, int(start), int(end), int(stream), int(graph),
                                   int(size), name))
    activities.sort(key=lambda a: a.start_ns)
    return activities


def kernel_class(name: str) -> str:
    """``void mul_mat_vec_q<(ggml_type)12, 1>(...)`` -> ``mul_mat_vec_q``."""
    name = re.sub(r"^void ", "", name)
    depth, end = 0, len(name)
    for index, char in enumerate(name):  # stop at the first top-level '<' or '('
        if char in "<(" and depth == 0:
            end = index
            break
    return name[:end].strip() or name


def split_steps(activities: Sequence[Activity], n_vocab: int) -> list[Step]:
    """Cut the trace after each logits copy to the host (``rows * n_vocab * 4`` bytes)."""
    steps: list[Step] = []
    current = Step()
    previous_end: int | None = None
    for activity in activities:
        if not current.activities and previous_end is not None:
            current.host_gap_ns = activity.start_ns - previous_end
        current.activities.append(activity)
        is_logits_copy = (activity.kind == "memcpy" and activity.name == "DtoH"
                          and activity.bytes >= _MIN_LOGITS_COPY_BYTES
                          and activity.bytes % (4 * n_vocab) == 0)
        if is_logits_copy:
            current.logits_rows = activity.bytes // (4 * n_vocab)
            previous_end = max(a.end_ns for a in current.activities)
            steps.append(current)
            current = Step()
    return steps  # what follows the last logits copy is no forward step


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def summarise(steps: Sequence[Step], *, top: int = 12) -> list[dict[str, Any]]:
    """One summary per kind of step (logits rows, kernels per step), most frequent first."""
    groups: dict[tuple[int, int], list[Step]] = defaultdict(list)
    for step in steps:
        groups[(step.logits_rows, len(step.kernels))].append(step)
    summaries = []
    for (rows, n_kernels), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        per_class: dict[str, list[int]] = defaultdict(list)
        for step in members:
            totals: Counter[str] = Counter()
            for kernel in step.kernels:
                totals[kernel_class(kernel.name)] += kernel.duration_ns
            for name, total in totals.items():
                per_class[name].append(total)
        kernel_ns = [sum(k.duration_ns for k in s.kernels) for s in members]
        copies = [a for s in members for a in s.activities if a.kind == "memcpy"]
        host_gaps = [s.host_gap_ns for s in members if s.host_gap_ns is not None]
        classes = sorted(per_class.items(), key=lambda kv: -statistics.median(kv[1]))
        summaries.append({
            "logits_rows": rows,
            "kernels_per_step": n_kernels,
            "steps": len(members),
            "in_cuda_graph": sum(1 for s in members for k in s.kernels if k.graph) /
            max(1, sum(len(s.kernels) for s in members)),
            "span_ms": _ms(statistics.median(s.span_ns for s in members)),
            "busy_ms": _ms(statistics.median(s.busy_ns for s in members)),
            "kernel_ms": _ms(statistics.median(kernel_ns)),
            "gaps_ms": _ms(statistics.median(s.span_ns - s.busy_ns for s in members)),
            "host_before_ms": _ms(statistics.median(host_gaps)) if host_gaps else None,
            "memcpy_per_step": len(copies) / len(members),
            "memcpy_ms": _ms(sum(c.duration_ns for c in copies) / len(members)),
            "classes": [{"name": name, "ms": _ms(statistics.median(times)),
                         "kernels": round(sum(1 for s in members for k in s.kernels
                                              if kernel_class(k.name) == name) / len(members),
                                          1)}
                        for name, times in classes[:top]],
        })
    return summaries
