"""The engine is compiled without AMX where the CPU reports it (daemons/cpu_features.py)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from daemons import cpu_features
from daemons.engine import cmake_args


def test_amx_is_read_from_the_cpu_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    with_amx = tmp_path / "with"
    with_amx.write_text("flags\t\t: fpu avx512f avx512_vnni amx_bf16 amx_tile amx_int8\n")
    without = tmp_path / "without"
    without.write_text("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert cpu_features.cpu_reports_amx(with_amx)
    assert not cpu_features.cpu_reports_amx(without)
    assert not cpu_features.cpu_reports_amx(tmp_path / "absent")


def test_an_arm_cpu_never_gets_x86_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert cpu_features.engine_isa_cmake_args() == ()


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_engine_build_of_an_amx_cpu_turns_amx_off(backend: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_features, "cpu_reports_amx", lambda: True)
    args = cmake_args(backend)
    for language in ("C", "CXX"):
        flags = next(a for a in args if a.startswith(f"-DCMAKE_{language}_FLAGS="))
        wanted = {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"}
        assert wanted <= set(flags.split("=", 1)[1].split())
    monkeypatch.setattr(cpu_features, "cpu_reports_amx", lambda: False)
    assert not any("amx" in a for a in cmake_args(backend))
