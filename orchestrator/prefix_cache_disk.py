"""The prefix cache's disk tier: one model's snapshot files for one daemon identity.

Files live in ``<kv_cache_dir>/<model>-<state_id>/``, each named by the hash of the
tokens it covers (``prefix_key``), so a prompt is looked up by hashing its prefixes at
the places snapshots are taken (its marks and its whole length). The daemon writes and
reads them (``save_slot``/``load_slot``, PROTOCOL.md 5.10) and checks each file's identity
and checksum; this module only names, finds and trims them: LRU by file time within a
byte budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FILE_SUFFIX", "SnapshotDir", "prefix_key"]

FILE_SUFFIX = ".lsnap"


def prefix_key(tokens: bytes) -> str:
    """The file name stem of a prefix: the hash of its tokens (int32 LE)."""
    return hashlib.sha256(tokens).hexdigest()[:40]


class SnapshotDir:
    """The snapshot files of one model under one daemon identity."""

    def __init__(self, path: Path, budget_bytes: int) -> None:
        self.path = path
        self.budget_bytes = budget_bytes
        """0: no limit."""
        path.mkdir(parents=True, exist_ok=True)
        for leftover in path.glob(f"*{FILE_SUFFIX}.tmp-*"):
            leftover.unlink(missing_ok=True)  # a write a crash cut short

    def path_of(self, tokens: bytes) -> Path:
        return self.path / f"{prefix_key(tokens)}{FILE_SUFFIX}"

    def find(self, wanted: bytes, ends: Sequence[int]) -> tuple[int, Path] | None:
        """The longest prefix of ``wanted`` (int32 LE) ending at one of ``ends`` (token
        positions, ascending) that has a file: (its end, the file)."""
        hasher = hashlib.sha256()
        hashed = 0
        found: tuple[int, Path] | None = None
        for end in ends:
            hasher.update(wanted[hashed * 4: end * 4])
            hashed = end
            path = self.path / f"{hasher.copy().hexdigest()[:40]}{FILE_SUFFIX}"
            if path.exists():
                found = (end, path)
        return found

    @staticmethod
    def touch(path: Path) -> None:
        """Used now: the last to go (LRU by file time)."""
        with contextlib.suppress(FileNotFoundError):  # the budget may have taken it
            os.utime(path)

    def usage(self) -> int:
        return sum(size for _, size, _ in self._files())

    def trim(self) -> tuple[int, int]:
        """Remove the least recently used files past the budget: (bytes left, files
        removed)."""
        files = self._files()
        total = sum(size for _, size, _ in files)
        removed = 0
        if self.budget_bytes:
            for _, size, path in sorted(files):
                if total <= self.budget_bytes:
                    break
                path.unlink(missing_ok=True)
                total -= size
                removed += 1
        return total, removed

    def _files(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every snapshot file; a file gone meanwhile is skipped."""
        files = []
        for path in self.path.glob(f"*{FILE_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                files.append((st.st_mtime, st.st_size, path))
        return files
