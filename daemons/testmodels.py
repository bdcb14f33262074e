"""Small random-weight GGUFs for tests, written by ``lucerna-mkmodels``.

They are real models to the engine (same metadata keys and tensor layouts as converted
checkpoints, only tiny and with deterministic random weights), so tests exercise the
daemons' real load and generate paths without downloading anything. The Qwen models
carry the real Qwen tokenizer that ships with the engine sources.

Cache layout (``lucerna_cache_dir()``)::

    models/test/qwen35.gguf     Qwen3.5 hybrid DeltaNet/attention target
    models/test/qwen3.gguf      Qwen3 dense
    models/test/laguna.gguf     Laguna MoE
    models/test/deepseek4.gguf  DeepSeek-V4 MoE
    models/test/dflash.gguf     DFlash draft matched to qwen35.gguf
    models/test/stamp.json      generator version + seed the files were made with
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from daemons._locking import file_lock
from daemons.errors import BuildError
from daemons.native import ensure_native
from daemons.paths import lucerna_cache_dir, repo_root

__all__ = [
    "TEST_MODEL_NAMES", "TEST_MODEL_SEED", "ensure_test_models", "mkmodels_vocabularies",
    "models_dir",
]

Progress = Callable[[str], None]

TEST_MODEL_NAMES = ("qwen35", "qwen3", "laguna", "deepseek4", "dflash")
TEST_MODEL_SEED = 42

_STAMP = "stamp.json"


def mkmodels_vocabularies() -> list[str]:
    """The engine tree's ``models/ggml-vocab-*.gguf`` files that lucerna-mkmodels copies
    into the models it writes, as its sources (native/src/mkmodels/) name them."""
    names: set[str] = set()
    for source in (repo_root() / "native" / "src" / "mkmodels").glob("*.cpp"):
        names.update(re.findall(r"ggml-vocab-[a-z0-9.-]+?\.gguf", source.read_text()))
    return sorted(names)


def models_dir() -> Path:
    """Where the test models live (under the Lucerna cache)."""
    return lucerna_cache_dir() / "models" / "test"


def _model_paths(out_dir: Path) -> dict[str, Path]:
    return {name: out_dir / f"{name}.gguf" for name in TEST_MODEL_NAMES}


def _generator_version(mkmodels: Path) -> str:
    result = subprocess.run([str(mkmodels), "--version"], capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{mkmodels} --version failed: {result.stderr.strip()[-400:]}")
    return result.stdout.strip()


def _is_current(out_dir: Path, wanted: dict[str, object]) -> bool:
    stamp = out_dir / _STAMP
    if not stamp.exists():
        return False
    try:
        recorded = json.loads(stamp.read_text())
    except ValueError:
        return False
    return recorded == wanted and all(path.exists() for path in _model_paths(out_dir).values())


def ensure_test_models(progress: Progress = print) -> dict[str, Path]:
    """Generate the test models unless the cache holds this generator's output already."""
    build = ensure_native(progress=progress)
    out_dir = models_dir()
    wanted: dict[str, object] = {
        "generator": _generator_version(build.mkmodels),
        "seed": TEST_MODEL_SEED,
        "models": list(TEST_MODEL_NAMES),
    }
    if _is_current(out_dir, wanted):
        return _model_paths(out_dir)

    with file_lock(out_dir / ".lock"):
        if _is_current(out_dir, wanted):
            return _model_paths(out_dir)
        (out_dir / _STAMP).unlink(missing_ok=True)
        progress(f"writing test models into {out_dir}")
        started = time.monotonic()
        cmd = [
            str(build.mkmodels),
            "--out",
            str(out_dir),
            "--seed",
            str(TEST_MODEL_SEED),
            "--only",
            ",".join(TEST_MODEL_NAMES),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-20:])
            raise BuildError(f"lucerna-mkmodels failed (exit {result.returncode}):\n{tail}")
        for line in result.stderr.splitlines():
            if line.startswith("mkmodels:"):
                progress(f"  {line}")
        (out_dir / _STAMP).write_text(json.dumps(wanted, indent=2) + "\n")
        progress(f"test models ready in {time.monotonic() - started:.1f} s")
    return _model_paths(out_dir)
