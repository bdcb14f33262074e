"""The facts a result must carry about where it ran: machine, card, commit."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

import psutil

from daemons.paths import repo_root

__all__ = ["commit", "machine"]


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _cards() -> list[str]:
    """The GPUs ``nvidia-smi`` names, with their memory; none without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    result = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def machine(backend: str) -> dict[str, Any]:
    cards = _cards()
    return {
        "host": platform.node(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "backend": backend,
        "cards": cards,
        # The one line every table row shows.
        "card": cards[0] if cards and backend != "cpu" else f"CPU ({_cpu_model()})",
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def commit() -> dict[str, Any]:
    """The checkout's commit, and whether its tracked files differ from it."""
    def git(*args: str) -> str | None:
        result = subprocess.run(["git", "-C", str(repo_root()), *args], capture_output=True,
                                text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None
            else None}
