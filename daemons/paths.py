"""Where Lucerna keeps things outside the repository."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["lucerna_cache_dir", "repo_root"]


def lucerna_cache_dir() -> Path:
    """The cache for the engine, native builds and models.

    ``LUCERNA_CACHE_DIR`` wins, then ``$XDG_CACHE_HOME/lucerna``, then ``~/.cache/lucerna``.
    """
    explicit = os.environ.get("LUCERNA_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "lucerna"


def repo_root() -> Path:
    """The checkout this package was imported from (it is installed editable)."""
    return Path(__file__).resolve().parent.parent
