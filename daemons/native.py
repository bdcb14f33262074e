"""Our native daemons (``native/``), built against the pinned engine.

``ensure_native()`` builds the engine first if needed (``daemons.engine``), then
configures and builds ``native/`` into ``<repo>/build/native-<backend>``. Configuring
happens once per engine tree; after that a build is an incremental ``cmake --build``
that costs a fraction of a second when nothing changed, so callers may call it freely.

Layout of a build::

    build/native-cpu/bin/lucerna-qwen35        one executable per role
    build/native-cpu/bin/lucerna-laguna
    build/native-cpu/bin/lucerna-pflash
    build/native-cpu/bin/lucerna-ds4-shard
    build/native-cpu/bin/lucerna-mkmodels      the test-model generator
    build/native-cpu/lucerna-native-build.log  the last configure/build output
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from daemons._build import Progress, run_build_step
from daemons._locking import file_lock
from daemons.engine import EngineBuild, ensure_engine
from daemons.errors import BuildError
from daemons.paths import repo_root
from daemons.roles import ROLES, role_named

__all__ = ["NativeBuild", "ensure_native"]

_MKMODELS = "lucerna-mkmodels"
_LOG_NAME = "lucerna-native-build.log"


@dataclass(frozen=True)
class NativeBuild:
    """A built ``native/`` tree: where each role's executable is."""

    backend: str
    build_dir: Path
    engine: EngineBuild

    @property
    def bin_dir(self) -> Path:
        return self.build_dir / "bin"

    @property
    def mkmodels(self) -> Path:
        return self.bin_dir / _MKMODELS

    def binary(self, role: str) -> Path:
        return self.bin_dir / role_named(role).executable


def _cache_entries(cache: Path) -> dict[str, str]:
    """The ``NAME:TYPE=VALUE`` entries of a CMakeCache.txt, by name."""
    entries: dict[str, str] = {}
    for line in cache.read_text(errors="replace").splitlines():
        if not line or line.startswith(("#", "//")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        entries[key.split(":", 1)[0]] = value
    return entries


def _configure_args(engine: EngineBuild, build_dir: Path) -> list[str]:
    args = [
        "cmake",
        "-S",
        str(repo_root() / "native"),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DLUCERNA_ENGINE_SRC={engine.source_dir}",
        f"-DLUCERNA_ENGINE_BUILD={engine.build_dir}",
        f"-DLUCERNA_ENGINE_NAME={engine.name}",
        f"-DLUCERNA_BACKEND={engine.backend}",
    ]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    return args


def _is_configured(engine: EngineBuild, build_dir: Path) -> bool:
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return False
    entries = _cache_entries(cache)
    return (
        entries.get("LUCERNA_ENGINE_SRC") == str(engine.source_dir)
        and entries.get("LUCERNA_ENGINE_BUILD") == str(engine.build_dir)
        and entries.get("LUCERNA_ENGINE_NAME") == engine.name
        and entries.get("LUCERNA_BACKEND") == engine.backend
    )


def ensure_native(backend: str | None = None, progress: Progress = print) -> NativeBuild:
    """Build the engine (once) and our daemons (incrementally) for ``backend``."""
    engine = ensure_engine(backend, progress=progress)
    build_dir = repo_root() / "build" / f"native-{engine.backend}"
    build = NativeBuild(backend=engine.backend, build_dir=build_dir, engine=engine)
    log = build_dir / _LOG_NAME

    with file_lock(repo_root() / "build" / f".lock-native-{engine.backend}"):
        build_dir.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        if not _is_configured(engine, build_dir):
            progress(f"configuring native daemons ({engine.backend}) in {build_dir}")
            run_build_step(_configure_args(engine, build_dir), "configuring native/", log,
                           progress)
        jobs = str(os.cpu_count() or 2)
        run_build_step(
            ["cmake", "--build", str(build_dir), "--parallel", jobs], "building native/", log,
            progress,
        )

    missing = [
        path.name
        for path in (*(build.binary(role) for role in ROLES), build.mkmodels)
        if not path.exists()
    ]
    if missing:
        raise BuildError(
            f"the native build finished but {', '.join(missing)} is missing from {build.bin_dir}; "
            f"see {log}"
        )
    return build
