"""daemons._build: one build step, logged, with progress and readable failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemons._build import run_build_step
from daemons.errors import BuildError


def test_failure_shows_the_compiler_error(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    script = "echo '[1/3] Building CXX object x.o'; echo 'src/x.cpp:3:1: error: expected ;'; exit 1"
    with pytest.raises(BuildError, match="building x failed") as failed:
        run_build_step(["sh", "-c", script], "building x", log, lambda _line: None)
    assert "error: expected ;" in str(failed.value)
    assert str(log) in str(failed.value)


def test_progress_reports_each_step_once(tmp_path: Path) -> None:
    lines: list[str] = []
    script = (
        "echo '[ 10%] Building C object a.o'; echo '[ 10%] Building C object b.o'; "
        "echo 'noise'; echo '[2/2] Linking CXX executable bin/x'"
    )
    run_build_step(["sh", "-c", script], "engine", tmp_path / "log", lines.append)
    assert lines == ["  engine [ 10%]", "  engine [2/2]"]
    assert "noise" in (tmp_path / "log").read_text()
