"""daemons.native: building native/ against the pinned engine."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from daemons import native
from daemons.errors import BuildError
from daemons.native import ROLE_BINARIES, NativeBuild, ensure_native
from daemons.paths import repo_root


def test_public_api() -> None:
    assert native.__all__ == ["ROLE_BINARIES", "NativeBuild", "ensure_native"]


def test_builds_every_role_and_the_generator() -> None:
    build = ensure_native(progress=lambda _line: None)
    assert isinstance(build, NativeBuild)
    assert build.build_dir == repo_root() / "build" / f"native-{build.backend}"
    assert build.bin_dir == build.build_dir / "bin"
    for role, name in ROLE_BINARIES.items():
        path = build.binary(role)
        assert path.name == name and path.is_file()
    assert build.mkmodels.name == "lucerna-mkmodels" and build.mkmodels.is_file()
    assert build.engine.backend == build.backend


def test_unknown_role_is_a_value_error() -> None:
    build = ensure_native(progress=lambda _line: None)
    with pytest.raises(ValueError, match="ds4_shard"):
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


def test_failure_shows_the_compiler_error(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text(
        "[1/3] Building CXX object x.o\nsrc/x.cpp:3:1: error: expected ';'\nninja: build stopped\n"
    )
    tail = native._failure_tail(log)
    assert "error: expected ';'" in tail
    with pytest.raises(BuildError, match="error: expected"):
        native._run_step(
            ["sh", "-c", "echo 'a.cpp:1: error: boom'; exit 1"], "building", log, lambda _line: None
        )
