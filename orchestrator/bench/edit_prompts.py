"""The edit workload: code repeated with a change, the prompt-lookup case.

Each prompt holds a Python file of this repository as it was at commit 3777fab (stored
in ``data/edit_sources.jsonl``, so the workload is the same on a machine without the
repository's history) and asks for it back with one function renamed, the answer's code
block already opened with the file's first line: the model's best continuation repeats
the file from its context, which prompt lookup and the n-gram proposers find.
``lines`` keeps only the file's first lines (smaller runs; the answer still repeats).

``bin/prompt-lookup-bench`` and ``bin/spec-parallel-bench`` use the same prompts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["EDIT_COMMIT", "EditSource", "edit_prompt", "edit_sources"]

EDIT_COMMIT = "3777fab"


@dataclass(frozen=True)
class EditSource:
    path: str
    function: str
    new_name: str
    text: str


@cache
def edit_sources() -> tuple[EditSource, ...]:
    data = resources.files("orchestrator.bench").joinpath("data/edit_sources.jsonl")
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return tuple(EditSource(row["path"], row["function"], row["new_name"], row["text"])
                 for row in rows)


def edit_prompt(source: EditSource, scale: float = 1.0) -> str:
    """The prompt for ``source``, its file cut to ``ceil(lines * scale)`` lines."""
    lines = source.text.splitlines(keepends=True)
    text = "".join(lines[:max(1, math.ceil(len(lines) * min(scale, 1.0)))])
    path, function, new = source.path, source.function, source.new_name
    return (f"Below is the file {path}, then the same file with the function `{function}` "
            f"renamed to `{new}` and nothing else changed.\n\n{path}:\n```python\n{text}```\n\n"
            f"{path}, with `{function}` renamed to `{new}`:\n```python\n{lines[0]}")
