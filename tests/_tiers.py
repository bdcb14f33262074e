"""The suite's two tiers: fast by default, full with ``--full``.

Both run the same tests; they differ by depth, not by coverage:

- ``tiered(values)`` parametrizes a matrix (models, roles, sizes) with its first entry in
  both tiers and the others in the full tier only (marked ``full``);
- the ``depth`` fixture (a ``Depth``) tells a test that repeats something how often:
  ``depth(quick=10, full=100)`` kills, cycles, fuzz lines, seconds of soak.

``TierPlugin`` holds the tiers' rules:

- the fast tier deselects the items marked ``full``;
- in the fast tier an unmarked test whose call takes over ``FAST_CALL_LIMIT_S`` fails:
  mark it ``slow`` (it then still runs) or make it faster, so the fast tier's time stays
  visible test by test instead of creeping up;
- ``--record-durations FILE`` (``bin/lucerna test --full`` passes it) writes every
  test's seconds (setup, call and teardown) of a run of the whole suite, sorted by test,
  so a test that grows shows in review as a diff of tests/durations.json.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["FAST_CALL_LIMIT_S", "Depth", "TierPlugin", "tiered"]

T = TypeVar("T")

FAST_CALL_LIMIT_S = 5.0
"""The longest call an unmarked test may take in the fast tier."""


@dataclass(frozen=True)
class Depth:
    """The tier a test runs in; call it with the quick and the full value."""

    full: bool

    def __call__(self, *, quick: T, full: T) -> T:
        return full if self.full else quick


def tiered(values: Iterable[Any], ids: Sequence[str] | None = None) -> list[Any]:
    """Parameters whose first entry runs in both tiers, the others in ``--full`` only.

    A value may already be a ``pytest.param`` (its marks are kept).
    """
    params = []
    for index, value in enumerate(values):
        param = value if isinstance(value, type(pytest.param(None))) else pytest.param(value)
        marks = list(param.marks) + ([pytest.mark.full] if index else [])
        param_id = ids[index] if ids is not None else param.id
        params.append(pytest.param(*param.values, marks=marks, id=param_id))
    return params


def _measuring_coverage() -> bool:
    coverage = sys.modules.get("coverage")
    return coverage is not None and coverage.Coverage.current() is not None


class TierPlugin:
    """The tiers' collection, timing and recording rules (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.full = bool(config.getoption("--full"))
        record = config.getoption("--record-durations")
        self.record_path = Path(record) if record else None
        self.seconds: dict[str, float] = defaultdict(float)
        self.started = time.monotonic()
        # A coverage run measures lines, not the tier's times (tracing slows every line).
        self.timed = not self.full and not _measuring_coverage()

    @staticmethod
    def add_options(parser: pytest.Parser) -> None:
        parser.addoption("--full", action="store_true",
                         help="the full tier: every entry of each matrix, every test at full "
                         "depth (bin/lucerna test --full; CI)")
        parser.addoption("--record-durations", metavar="FILE", default=None,
                         help="write each test's seconds to FILE (JSON) when the whole "
                         "suite ran")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if self.full:
            return
        kept = [item for item in items if item.get_closest_marker("full") is None]
        if len(kept) != len(items):
            config.hook.pytest_deselected(
                items=[item for item in items if item.get_closest_marker("full") is not None])
            items[:] = kept

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if (not self.timed or report.when != "call" or not report.passed
                or item.get_closest_marker("slow") is not None
                or report.duration <= FAST_CALL_LIMIT_S):
            return
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {report.duration:.1f} s, over the fast tier's "
            f"{FAST_CALL_LIMIT_S:g} s for a test not marked slow: mark it "
            "@pytest.mark.slow (it still runs in the fast tier) or make it faster")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.record_path is None or hasattr(self.config, "workerinput"):
            return
        whole_suite = (self.config.args_source == pytest.Config.ArgsSource.TESTPATHS
                       and not self.config.option.keyword and not self.config.option.lf)
        if not whole_suite:
            return
        document = {
            "tier": "full" if self.full else "fast",
            "tests": len(self.seconds),
            "wall_s": round(time.monotonic() - self.started, 1),
            "sum_s": round(sum(self.seconds.values()), 1),
            "seconds": {nodeid: round(self.seconds[nodeid], 1)
                        for nodeid in sorted(self.seconds)},
        }
        self.record_path.write_text(json.dumps(document, indent=1) + "\n")
