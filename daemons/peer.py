"""llama.cpp's own ``llama-server`` and ``llama-bench``: the benchmark peer, never a server of ours.

``lucerna bench --against llama-server`` compares Lucerna with the server that
ships with the very engine our daemons link. To make that comparison fair the
peer is built from the same pinned source tree (``daemons.engine``), with the
same backend flags, into its own build directory next to the serving build::

    engine/llama-cpp-python-0.3.36/build-cpu/        the serving build (untouched here)
    engine/llama-cpp-python-0.3.36/build-cpu-peer/   llama-server, llama-bench

Nothing in serving imports this module; it is a benchmark-only dependency built
on first use of the benchmark (minutes), never by ``lucerna setup`` or CI.

The web UI is turned off both ways the engine could provision it: no npm build
(``LLAMA_BUILD_UI=OFF``) and no prebuilt download from the Hugging Face bucket
(``LLAMA_USE_PREBUILT_UI=OFF``), so the build needs no network. llama-server
then embeds no UI, which a benchmark does not need.
"""

from __future__ import annotations

from pathlib import Path

from daemons._build import Progress, cmake_build_once
from daemons.engine import (
    BACKENDS,
    ENGINE_PIN,
    EnginePin,
    cmake_args,
    engine_root,
    ensure_engine_source,
    selected_backend,
)
from daemons.errors import BuildError

__all__ = ["PEER_TARGETS", "ensure_llama_server", "peer_build_dir", "peer_cmake_args"]

PEER_TARGETS = ("llama-server", "llama-bench")

# The serving build's flags with the tools and server switched on. Anything not
# named here (build type, shared libs, RPC, the backend's own flags) stays as the
# serving build has it, so the peer runs the same kernels.
_PEER_OVERRIDES = {
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
}


def peer_cmake_args(backend: str) -> list[str]:
    """``daemons.engine.cmake_args(backend)`` with ``_PEER_OVERRIDES`` applied."""
    args = [arg for arg in cmake_args(backend)
            if arg.removeprefix("-D").split("=", 1)[0] not in _PEER_OVERRIDES]
    return [*args, *(f"-D{key}={value}" for key, value in _PEER_OVERRIDES.items())]


def peer_build_dir(backend: str, pin: EnginePin = ENGINE_PIN) -> Path:
    return engine_root(pin) / f"build-{backend}-peer"


def ensure_llama_server(
    backend: str | None = None, pin: EnginePin = ENGINE_PIN, progress: Progress = print
) -> Path:
    """Return the path of the peer ``llama-server``, building it first if needed.

    ``llama-bench`` lies next to it. The build is stamped with its flags, targets
    and the source's sha256, and guarded by its own lock, so concurrent callers
    build it once and a change of flags rebuilds it.
    """
    backend = backend or selected_backend()
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    source = ensure_engine_source(pin, progress)
    build_dir = peer_build_dir(backend, pin)
    cmake_build_once(
        source=source, sha256=pin.sha256, build_dir=build_dir, args=peer_cmake_args(backend),
        targets=PEER_TARGETS, stamp_name="lucerna-peer.json",
        lock=engine_root(pin) / f".lock-{backend}-peer", name="the peer",
        announce=f"building the benchmark peer llama-server + llama-bench ({pin.name}, "
                 f"{backend}); benchmark-only, once, takes minutes",
        progress=progress)
    binary = build_dir / "bin" / "llama-server"
    return binary
