"""bin/alternate runs a command under each setting in turn, round after round, and says
which run printed what."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemons.paths import repo_root

SHOW = [sys.executable, "-c", "import os; print('x is', os.environ.get('X', 'unset'))"]


def _alternate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(repo_root() / "bin" / "alternate"), *args],
                          capture_output=True, text=True, check=False, timeout=60)


def test_each_round_runs_every_setting_in_order(tmp_path: Path) -> None:
    out = tmp_path / "ab.txt"
    result = _alternate("--rounds", "2", "--setting", "X=1", "--setting", "X=2 Y=3",
                        "--out", str(out), "--", *SHOW)
    assert result.returncode == 0, result.stderr
    expected = "".join(f"== round {r}: {label}\nx is {value}\n" for r in (1, 2)
                       for label, value in (("default", "unset"), ("X=1", "1"),
                                            ("X=2 Y=3", "2")))
    assert result.stdout == expected
    assert out.read_text() == expected


def test_a_failed_run_is_marked_and_fails_the_whole() -> None:
    result = _alternate("--rounds", "1", "--no-default", "--setting", "X=1", "--tail", "1",
                        "--", sys.executable, "-c", "print('a'); print('b'); raise SystemExit(3)")
    assert result.returncode == 1
    assert result.stdout == "== round 1: X=1\nb\n== exit status 3\n"


def test_a_setting_that_is_not_assignments_is_refused() -> None:
    result = _alternate("--setting", "X", "--", *SHOW)
    assert result.returncode == 2
    assert "expected VAR=VALUE words" in result.stderr
