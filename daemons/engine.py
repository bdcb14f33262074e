"""The pinned llama.cpp/ggml engine: fetch, verify, build once per backend, cache.

The engine is never vendored into this repository. We take the copy of
llama.cpp that ships inside one exact PyPI sdist (``llama-cpp-python``), check
its sha256, unpack only ``vendor/llama.cpp`` and build it once per
(version, backend) into the user's cache. Our own native code (``native/``)
then builds against that tree in seconds.

Cache layout (``lucerna_cache_dir()``)::

    downloads/llama_cpp_python-0.3.36.tar.gz
    engine/llama-cpp-python-0.3.36/src/            the unpacked llama.cpp tree
    engine/llama-cpp-python-0.3.36/build-cpu/      one build tree per backend
    engine/llama-cpp-python-0.3.36/build-cuda/
    engine/llama-cpp-python-0.3.36/src-p<hash>/    with our patch series applied
    engine/llama-cpp-python-0.3.36/build-cpu-p<hash>/

Our patch series (``native/engine-patches/``, see daemons/_patches.py) applies to a
copy of the checked tree: the pristine tree stays for the benchmark peer, which must
be the engine as its users get it. Patched trees and builds are named after the
series' hash, so checkouts with different series share one cache without rebuilding
each other's engine, and a changed series builds afresh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from daemons._build import Progress, cmake_build_once
from daemons._fetch import fetch_pinned
from daemons._locking import file_lock
from daemons._patches import apply_series, read_series, series_hash
from daemons.cpu_features import engine_isa_cmake_args
from daemons.errors import BuildError
from daemons.paths import lucerna_cache_dir

__all__ = [
    "BACKENDS",
    "ENGINE_PIN",
    "EngineBuild",
    "EnginePin",
    "cmake_args",
    "engine_root",
    "ensure_engine",
    "ensure_engine_source",
    "ensure_patched_source",
    "selected_backend",
    "series_tag",
]

BACKENDS = ("cpu", "cuda", "hip")


@dataclass(frozen=True)
class EnginePin:
    package: str
    version: str
    sha256: str
    ggml_version: str

    @property
    def name(self) -> str:
        return f"{self.package}-{self.version}"

    @property
    def sdist_filename(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}.tar.gz"


ENGINE_PIN = EnginePin(
    package="llama-cpp-python",
    version="0.3.36",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    ggml_version="0.25.3",
)

# Libraries our daemons link and the targets that produce them. The RPC
# backend is always built: the ds4 expert shard serves a device through it.
ENGINE_TARGETS = ("llama", "llama-common", "ggml-rpc")

_COMMON_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_RPC=ON",
)

_BACKEND_CMAKE_ARGS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "cuda": ("-DGGML_CUDA=ON",),
    # Wired but untested here: no AMD GPU is available to this project.
    "hip": ("-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1100;gfx1151;gfx1201"),
}


@dataclass(frozen=True)
class EngineBuild:
    """A built engine: where its headers and shared libraries are."""

    pin: EnginePin
    backend: str
    source_dir: Path
    build_dir: Path
    series_hash: str  # of our patch series; "" when there is none

    @property
    def library_dir(self) -> Path:
        return self.build_dir / "bin"

    @property
    def name(self) -> str:
        """The pin, plus the series it carries: daemons report it in their ready line
        and stamp it into snapshots, so a snapshot never crosses engine builds."""
        if not self.series_hash:
            return self.pin.name
        return f"{self.pin.name}+{series_tag(self.series_hash)}"


def selected_backend() -> str:
    backend = os.environ.get("LUCERNA_BACKEND", "cpu").strip().lower() or "cpu"
    if backend not in BACKENDS:
        raise BuildError(
            f"LUCERNA_BACKEND={backend!r} is not a backend we build; "
            f"choose one of {', '.join(BACKENDS)}"
        )
    return backend


def engine_root(pin: EnginePin) -> Path:
    return lucerna_cache_dir() / "engine" / pin.name


def ensure_engine_source(pin: EnginePin = ENGINE_PIN, progress: Progress = print) -> Path:
    """Return the unpacked llama.cpp tree of the pinned sdist, fetching it if needed."""
    root = engine_root(pin)
    source = root / "src"
    stamp = root / "src.sha256"
    if stamp.exists() and stamp.read_text().strip() == pin.sha256 and source.is_dir():
        return source
    with file_lock(root / ".lock"):
        if stamp.exists() and stamp.read_text().strip() == pin.sha256 and source.is_dir():
            return source
        sdist = fetch_pinned(pin.package, pin.version, pin.sdist_filename, pin.sha256,
                             binary=False, what="the pinned llama.cpp, ~77 MB sdist",
                             error=BuildError, progress=progress)
        progress(f"unpacking llama.cpp from {sdist.name}")
        prefix = f"{pin.sdist_filename.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        staging = root / "src.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(sdist) as tar:
            members = []
            for member in tar.getmembers():
                if member.name.startswith(prefix):
                    member.name = member.name[len(prefix):]
                    members.append(member)
            tar.extractall(staging, members=members, filter="data")
        shutil.rmtree(source, ignore_errors=True)
        staging.rename(source)
        stamp.write_text(pin.sha256 + "\n")
    return source


def series_tag(digest: str) -> str:
    """How a patch series is named in directory and build names: ``p`` and 12 hex."""
    return f"p{digest[:12]}"


def ensure_patched_source(pin: EnginePin = ENGINE_PIN, progress: Progress = print) -> Path:
    """The pinned tree with our patch series applied: the tree our daemons build on.

    With no series this is the pristine tree itself."""
    pristine = ensure_engine_source(pin, progress)
    series = read_series()
    if not series:
        return pristine
    digest = series_hash(series)
    root = engine_root(pin)
    source = root / f"src-{series_tag(digest)}"
    stamp = root / f"src-{series_tag(digest)}.sha256"
    wanted = f"{pin.sha256}+{digest}"
    if stamp.exists() and stamp.read_text().strip() == wanted and source.is_dir():
        return source
    with file_lock(root / ".lock"):
        if stamp.exists() and stamp.read_text().strip() == wanted and source.is_dir():
            return source
        progress(f"applying {len(series)} engine patches: "
                 + ", ".join(patch.name for patch in series))
        staging = root / f"src-{series_tag(digest)}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(pristine, staging, symlinks=True)
        apply_series(series, staging)
        shutil.rmtree(source, ignore_errors=True)
        staging.rename(source)
        stamp.write_text(wanted + "\n")
    return source


# Without a GPU to ask (building on one machine for another), cover the cards people
# run: Ampere, Ada and Hopper (sm_90 is the H100/H200).
_CUDA_PORTABLE_ARCHS = "80;86;89;90"


def _cuda_archs() -> str:
    """``LUCERNA_CUDA_ARCHS`` wins; else the GPUs of this machine; else a portable set."""
    explicit = os.environ.get("LUCERNA_CUDA_ARCHS")
    if explicit:
        return explicit
    smi = shutil.which("nvidia-smi")
    if smi:
        result = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True)
        caps = sorted({line.strip().replace(".", "") for line in result.stdout.splitlines()
                       if line.strip()})
        if result.returncode == 0 and caps:
            return ";".join(caps)
    return _CUDA_PORTABLE_ARCHS


def cmake_args(backend: str) -> list[str]:
    args = [*_COMMON_CMAKE_ARGS, *_BACKEND_CMAKE_ARGS[backend], *engine_isa_cmake_args()]
    if backend == "cuda":
        args.append(f"-DCMAKE_CUDA_ARCHITECTURES={_cuda_archs()}")
    return args


def ensure_engine(
    backend: str | None = None, pin: EnginePin = ENGINE_PIN, progress: Progress = print
) -> EngineBuild:
    """Build the pinned engine for ``backend`` unless the cache already holds it."""
    backend = backend or selected_backend()
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    source = ensure_patched_source(pin, progress)
    series = read_series()
    digest = series_hash(series) if series else ""
    suffix = f"-{series_tag(digest)}" if digest else ""
    build_dir = engine_root(pin) / f"build-{backend}{suffix}"
    build = EngineBuild(pin=pin, backend=backend, source_dir=source, build_dir=build_dir,
                        series_hash=digest)
    cmake_build_once(
        source=source, sha256=f"{pin.sha256}+{digest}" if digest else pin.sha256,
        build_dir=build_dir, args=cmake_args(backend),
        targets=ENGINE_TARGETS, stamp_name="lucerna-engine.json",
        lock=engine_root(pin) / f".lock-{backend}", name="the engine",
        announce=f"building the pinned engine ({build.name}, ggml {pin.ggml_version}, "
                 f"{backend}); this happens once and takes minutes",
        progress=progress)
    return build
