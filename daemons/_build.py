"""Running one build step (cmake configure or build) with a log and progress."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from daemons._locking import file_lock
from daemons.errors import BuildError

__all__ = ["Progress", "cmake_build_once", "run_build_step"]

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


def cmake_build_once(
    *, source: Path, sha256: str, build_dir: Path, args: Sequence[str],
    targets: Sequence[str], stamp_name: str, lock: Path, name: str, announce: str,
    progress: Progress,
) -> None:
    """Configure ``source`` into ``build_dir`` with ``args`` and build ``targets``,
    unless the build there is stamped with exactly these and the source's ``sha256``.

    ``lock`` makes concurrent callers build once. ``name`` is what progress lines and
    errors call the build ("the engine"); ``announce`` is printed before a build
    starts. The stamp, ``build_dir / stamp_name``, is written only after a success,
    so an interrupted build is redone.
    """
    wanted = {"args": list(args), "targets": list(targets), "sha256": sha256}
    stamp = build_dir / stamp_name

    def is_built() -> bool:
        return stamp.exists() and json.loads(stamp.read_text()) == wanted

    if is_built():
        return
    with file_lock(lock):
        if is_built():
            return
        build_dir.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        log = build_dir / "lucerna-build.log"
        log.write_text("")
        jobs = str(os.cpu_count() or 2)
        progress(f"{announce} with {jobs} jobs into {build_dir}")
        run_build_step(["cmake", "-S", str(source), "-B", str(build_dir), *args],
                       f"configuring {name}", log, progress)
        run_build_step(["cmake", "--build", str(build_dir), "--parallel", jobs, "--target",
                        *targets], f"building {name}", log, progress)
        stamp.write_text(json.dumps(wanted))
        progress(f"{name} ready: {build_dir}")
