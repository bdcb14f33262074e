"""The linters see every Python file, including the suffix-less scripts in bin/.

pyproject.toml includes all of bin/ in ruff and leaves out the non-Python scripts by
name. This test asks ruff itself which files it lints, so a new Python script in bin/
is covered or this fails, and a script listed as non-Python that became Python is
caught too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemons.paths import repo_root
from tests._bin_scripts import bin_scripts, is_python_script


def _ruff_files(root: Path) -> set[Path]:
    """The files `ruff check .` lints from the repo root, as ruff reports them."""
    listing = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "."],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout
    return {Path(line).resolve() for line in listing.splitlines() if line.strip()}


def test_ruff_lints_every_python_script_in_bin_and_nothing_else_there() -> None:
    root = repo_root()
    bin_files = {path.resolve() for path in bin_scripts(root)}
    python_scripts = {path for path in bin_files if is_python_script(path)}
    assert python_scripts, "bin/ holds Python scripts; the shebang check found none"
    linted_in_bin = _ruff_files(root) & bin_files
    assert linted_in_bin == python_scripts, (
        "ruff must lint exactly the Python scripts in bin/: edit [tool.ruff] "
        "extend-exclude in pyproject.toml. "
        f"Not linted: {sorted(p.name for p in python_scripts - linted_in_bin)}; "
        f"linted but not Python: {sorted(p.name for p in linted_in_bin - python_scripts)}"
    )
