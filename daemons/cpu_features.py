"""Which of this CPU's instruction sets the engine is compiled for.

The engine builds with ``GGML_NATIVE`` (``-march=native``), so it compiles for every
instruction set the CPU reports. On CPUs that report Intel AMX (``amx_tile`` in
/proc/cpuinfo) that brings in ggml's AMX matmul kernels, and on this project's machines
the pinned engine's kernel dies on the first quantized matmul: SIGILL at ``tilezero
%tmm4`` in ``tinygemm_kernel_amx<block_q8_0, ...>`` (gemma3-270m Q4_K_M, whose output
matrix is Q8_0: every default-model request crashed the daemon). A standalone program
that requests the tile state as ggml does, loads a tile configuration and zeroes a tile
runs there, across a sleep, a signal and a second thread, so the fault is in how the
engine uses the tiles, and no other AMX machine is at hand to show where it works. So
the engine is compiled without AMX on such CPUs; the AVX-512 VNNI kernels serve instead.
"""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_reports_amx", "engine_isa_cmake_args"]

_NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def cpu_reports_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True on an x86-64 CPU whose flags list AMX tiles."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return "amx_tile" in cpuinfo.read_text()
    except OSError:
        return False


def engine_isa_cmake_args() -> tuple[str, ...]:
    """CMake arguments that keep ``-march=native`` off AMX where the CPU reports it."""
    if cpu_reports_amx():
        return (f"-DCMAKE_C_FLAGS={_NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={_NO_AMX_FLAGS}")
    return ()
