"""The scripts in bin/, told apart by their shebang (most are Python without a .py suffix)."""

from __future__ import annotations

from pathlib import Path


def bin_scripts(root: Path) -> list[Path]:
    return sorted(path for path in (root / "bin").iterdir() if path.is_file())


def is_python_script(path: Path) -> bool:
    with path.open("rb") as script:
        first_line = script.readline()
    return first_line.startswith(b"#!") and b"python" in first_line
