"""llama.cpp's own ``llama-server`` and ``llama-bench``: the benchmark peer, never a server of ours.

``lucerna bench`` compares Lucerna with the server that ships with the very engine our
daemons link, built two ways (``PEER_VARIANTS``):

- ``pristine`` (the default peer): the pinned, sha256-checked tree exactly as the sdist
  ships it, without our patch series (native/engine-patches/): llama-server as a user
  who installs that llama.cpp gets it. Our daemons run the *patched* engine, so the two
  do **not** run the same kernels: several patches change CPU and CUDA kernels
  (0105, 0109, 0110 on CPU; the 02xx series on CUDA). A figure against this peer is
  Lucerna's whole difference, kernels and design together.
- ``patched`` (``llama-server-patched``): the same server built from our patched tree,
  the tree our daemons build on, so it runs our kernels; a figure against it is the
  difference of design alone (scheduling, caching, speculation), and the gap between
  the two peers is what the patches give.

Both come from ``daemons.engine``'s one fetch and check (``ensure_engine_source``: the
pin and its sha256 are written once, there); the patched variant adds the patch step
(``ensure_patched_source``), the pristine one skips it. Each builds with the serving
build's backend flags (the same build type, shared libraries, backend, CUDA
architectures and ISA flags) plus the tools and the server, into its own directory, so
the serving build is never touched::

    engine/llama-cpp-python-0.3.36/build-cpu/                    the serving build
    engine/llama-cpp-python-0.3.36/build-cpu-peer/               pristine llama-server, llama-bench
    engine/llama-cpp-python-0.3.36/build-cpu-peer-p<series>/     patched llama-server, llama-bench

Nothing in serving imports this module; it is a benchmark-only dependency, built on
first use of the benchmark or by ``lucerna test`` for the benchmark's smoke tests
(minutes, once per pin, backend and series), never by ``lucerna setup``.

The web UI is turned off both ways the engine could provision it: no npm build
(``LLAMA_BUILD_UI=OFF``) and no prebuilt download from the Hugging Face bucket
(``LLAMA_USE_PREBUILT_UI=OFF``), so the build needs no network. llama-server
then embeds no UI, which a benchmark does not need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from daemons._build import Progress, cmake_build_once
from daemons._patches import read_series, series_hash
from daemons.engine import (
    BACKENDS,
    ENGINE_PIN,
    EnginePin,
    cmake_args,
    engine_root,
    ensure_engine_source,
    ensure_patched_source,
    selected_backend,
    series_tag,
)
from daemons.errors import BuildError

__all__ = [
    "PEER_TARGETS",
    "PEER_VARIANTS",
    "PeerBuild",
    "PeerVariant",
    "ensure_llama_server",
    "peer_build",
    "peer_build_dir",
    "peer_cmake_args",
]

PEER_TARGETS = ("llama-server", "llama-bench")

PeerVariant = Literal["pristine", "patched"]
PEER_VARIANTS: tuple[PeerVariant, ...] = ("pristine", "patched")

# The serving build's flags with the tools and server switched on. Anything not
# named here (build type, shared libs, RPC, the backend's own flags) stays as the
# serving build has it: the same backend flags, whichever tree the peer is built from.
_PEER_OVERRIDES = {
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
}


@dataclass(frozen=True)
class PeerBuild:
    """Which llama-server a benchmark ran: its tree, its build, its binary."""

    variant: PeerVariant
    pin: EnginePin
    backend: str
    series: str
    """The patch series' tag (``p<hash>``) for the patched peer; "" for the pristine one."""
    patches: tuple[str, ...]
    """The patch files applied, in order; none for the pristine peer."""
    build_dir: Path

    @property
    def server(self) -> Path:
        return self.build_dir / "bin" / "llama-server"

    @property
    def bench(self) -> Path:
        return self.build_dir / "bin" / "llama-bench"

    @property
    def label(self) -> str:
        """``llama-server`` (pristine) or ``llama-server-patched``."""
        return "llama-server" if self.variant == "pristine" else "llama-server-patched"

    def describe(self) -> dict[str, object]:
        """What a result records about the peer: enough to build it again."""
        return {"label": self.label, "variant": self.variant, "pin": self.pin.name,
                "sha256": self.pin.sha256, "backend": self.backend,
                "patch_series": self.series or "none", "patches": list(self.patches),
                "cmake_args": peer_cmake_args(self.backend), "binary": str(self.server)}


def peer_cmake_args(backend: str) -> list[str]:
    """``daemons.engine.cmake_args(backend)`` with ``_PEER_OVERRIDES`` applied."""
    args = [arg for arg in cmake_args(backend)
            if arg.removeprefix("-D").split("=", 1)[0] not in _PEER_OVERRIDES]
    return [*args, *(f"-D{key}={value}" for key, value in _PEER_OVERRIDES.items())]


def peer_build_dir(backend: str, pin: EnginePin = ENGINE_PIN,
                   variant: PeerVariant = "pristine") -> Path:
    if variant == "pristine":
        return engine_root(pin) / f"build-{backend}-peer"
    series = read_series()
    suffix = f"-{series_tag(series_hash(series))}" if series else ""
    return engine_root(pin) / f"build-{backend}-peer{suffix}"


def peer_build(backend: str | None = None, pin: EnginePin = ENGINE_PIN,
               variant: PeerVariant = "pristine") -> PeerBuild:
    """The description of a peer build (built or not): no fetching, no building."""
    backend = _checked_backend(backend)
    series = read_series() if variant == "patched" else []
    return PeerBuild(variant=variant, pin=pin, backend=backend,
                     series=series_tag(series_hash(series)) if series else "",
                     patches=tuple(patch.name for patch in series),
                     build_dir=peer_build_dir(backend, pin, variant))


def _checked_backend(backend: str | None) -> str:
    backend = backend or selected_backend()
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend


def ensure_llama_server(
    backend: str | None = None, pin: EnginePin = ENGINE_PIN, progress: Progress = print,
    variant: PeerVariant = "pristine",
) -> PeerBuild:
    """The peer ``llama-server`` (and ``llama-bench`` next to it), built first if needed.

    The build is stamped with its flags, targets and its tree's identity (the sdist's
    sha256, plus the series' hash for the patched peer), and guarded by its own lock,
    so concurrent callers build it once and a change of flags or series rebuilds it.
    """
    if variant not in PEER_VARIANTS:
        raise BuildError(f"unknown peer {variant!r}; choose one of {', '.join(PEER_VARIANTS)}")
    build = peer_build(backend, pin, variant)
    if variant == "pristine":
        source, identity = ensure_engine_source(pin, progress), pin.sha256
    else:
        source = ensure_patched_source(pin, progress)
        series = read_series()
        identity = f"{pin.sha256}+{series_hash(series)}" if series else pin.sha256
    what = "our patched tree" if variant == "patched" else "the pristine pinned tree"
    cmake_build_once(
        source=source, sha256=identity, build_dir=build.build_dir,
        args=peer_cmake_args(build.backend), targets=PEER_TARGETS,
        stamp_name="lucerna-peer.json",
        lock=engine_root(pin) / f".lock-{build.backend}-peer-{variant}",
        name=f"the {variant} peer",
        announce=f"building the benchmark peer {build.label} + llama-bench from {what} "
                 f"({pin.name}, {build.backend}); benchmark-only, once, takes minutes",
        progress=progress)
    return build
