"""daemons.native: building native/ against the pinned engine."""

from __future__ import annotations

import subprocess
import time

import pytest

from daemons import native
from daemons.errors import ModelError
from daemons.native import NativeBuild, ensure_native
from daemons.paths import repo_root
from daemons.roles import ROLES


def test_public_api() -> None:
    assert native.__all__ == ["NativeBuild", "ensure_native"]


def test_builds_every_role_and_the_generator() -> None:
    build = ensure_native(progress=lambda _line: None)
    assert isinstance(build, NativeBuild)
    assert build.build_dir == repo_root() / "build" / f"native-{build.backend}"
    assert build.bin_dir == build.build_dir / "bin"
    for role, spec in ROLES.items():
        path = build.binary(role)
        assert path.name == spec.executable and path.is_file()
    assert build.mkmodels.name == "lucerna-mkmodels" and build.mkmodels.is_file()
    assert build.engine.backend == build.backend


def test_unknown_role_is_a_model_error() -> None:
    build = ensure_native(progress=lambda _line: None)
    with pytest.raises(ModelError, match="ds4_shard"):
        build.binary("ds4-shard")


def test_second_build_is_incremental() -> None:
    ensure_native(progress=lambda _line: None)
    cache = repo_root() / "build" / "native-cpu" / "CMakeCache.txt"
    before = cache.stat().st_mtime_ns
    lines: list[str] = []
    started = time.monotonic()
    ensure_native("cpu", progress=lines.append)
    assert time.monotonic() - started < 10
    assert cache.stat().st_mtime_ns == before  # not reconfigured
    assert not any("configuring" in line or "Building" in line for line in lines)


def test_binaries_find_the_engine_without_ld_library_path() -> None:
    build = ensure_native(progress=lambda _line: None)
    env = {"PATH": "/usr/bin:/bin"}  # no LD_LIBRARY_PATH: the RPATH must do
    result = subprocess.run(
        [str(build.mkmodels), "--version"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("lucerna-mkmodels generator=")
    result = subprocess.run([str(build.binary("qwen35"))], capture_output=True, text=True, env=env)
    assert result.returncode == 2 and result.stdout.startswith("err bad_flag missing model path")
