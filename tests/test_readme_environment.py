"""README's environment table names every LUCERNA_ variable the program reads, and no other.

The readers are found in the code itself: ``os.environ.get``/``pop`` and ``os.getenv``
in Python (and module constants named ``*_ENV`` that hold a variable's name), ``getenv``
in the daemons' C++, ``${...}`` in the ``bin/lucerna`` shell launcher. Left out on
purpose: ``native/profiler`` (its LUCERNA_KERNEL_TRACE is how ``bin/gpu-kernel-profile``
hands its tracer a path, not a setting for a user).
"""

from __future__ import annotations

import re
from pathlib import Path

from daemons.paths import repo_root
from tests._bin_scripts import bin_scripts, is_python_script

_PYTHON_READ = re.compile(
    r'(?:environ\.(?:get|pop)|getenv)\(\s*"(LUCERNA_\w+)"|\w+_ENV\s*=\s*"(LUCERNA_\w+)"')
_CPP_READ = re.compile(r'getenv\(\s*"(LUCERNA_\w+)"\s*\)')
_SHELL_READ = re.compile(r"\$\{?(LUCERNA_\w+)")
_TABLE_ROW = re.compile(r"^\| `(LUCERNA_\w+)` \|", re.MULTILINE)


def _found(pattern: re.Pattern[str], paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for match in pattern.finditer(path.read_text(errors="replace")):
            names.update(group for group in match.groups() if group)
    return names


def variables_the_code_reads(root: Path) -> set[str]:
    python = [p for package in ("orchestrator", "daemons", "protocol")
              for p in (root / package).rglob("*.py")]
    scripts = bin_scripts(root)
    python += [p for p in scripts if is_python_script(p)]
    shell = [p for p in scripts if not is_python_script(p)]
    cpp = [p for p in (root / "native" / "src").rglob("*") if p.suffix in (".cpp", ".h")]
    return (_found(_PYTHON_READ, python) | _found(_CPP_READ, cpp)
            | _found(_SHELL_READ, shell))


def readme_environment_table(root: Path) -> set[str]:
    readme = (root / "README.md").read_text()
    section = readme.split("\nEnvironment:\n", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return set(_TABLE_ROW.findall(section))


def test_readme_lists_exactly_the_variables_the_code_reads() -> None:
    root = repo_root()
    read = variables_the_code_reads(root)
    # The readers this test must find, or its patterns have stopped matching the code.
    assert {"LUCERNA_BACKEND", "LUCERNA_LOG", "LUCERNA_PYTHON", "LUCERNA_API_KEY"} <= read
    listed = readme_environment_table(root)
    assert read == listed, (
        f"README.md's environment table misses {sorted(read - listed)} and lists "
        f"{sorted(listed - read)}, which nothing reads")
