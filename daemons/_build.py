"""Running one build step (cmake configure or build) with a log and progress."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from daemons.errors import BuildError

__all__ = ["Progress", "run_build_step"]

Progress = Callable[[str], None]


def _failure_tail(log: Path) -> str:
    """The compiler errors if there are any, else the end of the log."""
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    return "\n".join(errors[:20] if errors else lines[-30:])


def _progress_marker(line: str) -> str | None:
    """``[ 42%]`` (make) or ``[3/33]`` (ninja) of a compile or link line."""
    stripped = line.strip()
    if stripped.startswith("[") and ("Building" in stripped or "Linking" in stripped):
        return stripped.split("]", 1)[0] + "]"
    return None


def run_build_step(cmd: Sequence[str], what: str, log: Path, progress: Progress) -> None:
    """Run ``cmd``, appending its output to ``log`` and reporting each new step marker.

    On failure raises ``BuildError`` naming ``what`` failed, with the compiler's
    errors (or the log's tail) and the log's path.
    """
    with log.open("a") as log_file:
        log_file.write(f"$ {' '.join(cmd)}\n")
        log_file.flush()
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        assert proc.stdout is not None
        last = None
        for line in proc.stdout:
            log_file.write(line)
            marker = _progress_marker(line)
            if marker is not None and marker != last:
                last = marker
                progress(f"  {what} {marker}")
        code = proc.wait()
    if code != 0:
        raise BuildError(f"{what} failed (exit {code}); full log: {log}\n{_failure_tail(log)}")
