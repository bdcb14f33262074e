"""``lucerna niah``: does a needle survive PFlash, and what does compression buy in TTFT?

- ``synthetic_filler`` / ``corpus_filler`` and ``build_case``: haystacks sized to a
  length in the target's tokens, one numeric needle at a depth, a question at the end.
- ``open_daemon_backend`` / ``HttpBackend``: ask the target directly over the daemon
  protocol (with the server's own compression code) or through a running Lucerna.
- ``run_grid``: lengths x depths x (full + keep ratios), each answer timed.
- ``render_table`` / ``write_json`` / ``write_heatmap``: the results.
"""

from __future__ import annotations

from orchestrator.niah._backends import (
    Answer,
    Backend,
    DaemonBackend,
    HttpBackend,
    open_daemon_backend,
)
from orchestrator.niah._grid import FULL, Cell, run_grid
from orchestrator.niah._haystack import (
    Filler,
    NiahCase,
    build_case,
    corpus_filler,
    haystack_messages,
    needle_found,
    synthetic_filler,
)
from orchestrator.niah._report import render_table, summary, write_heatmap, write_json

__all__ = [
    "FULL",
    "Answer",
    "Backend",
    "Cell",
    "DaemonBackend",
    "Filler",
    "HttpBackend",
    "NiahCase",
    "build_case",
    "corpus_filler",
    "haystack_messages",
    "needle_found",
    "open_daemon_backend",
    "render_table",
    "run_grid",
    "summary",
    "synthetic_filler",
    "write_heatmap",
    "write_json",
]
