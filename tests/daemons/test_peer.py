"""The benchmark peer (llama.cpp's own llama-server), built from the pinned engine.

The flag tests run everywhere. The others need the pristine peer build, which takes
minutes on a small machine, once: ``bin/lucerna test`` builds it during setup (the
benchmark scenarios' smoke run needs it too), and the fixture builds it when a bare
pytest run finds it missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from daemons.engine import ENGINE_PIN, cmake_args, engine_root, ensure_engine_source
from daemons.peer import PEER_TARGETS, ensure_llama_server, peer_build_dir, peer_cmake_args
from orchestrator.bench.client import Endpoint, stream_request
from orchestrator.bench.prompts import code_prompts
from orchestrator.bench.servers import (
    ServerProcess,
    ServerSettings,
    free_port,
    llama_server_argv,
)


def flags(args: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("-D").split("=", 1) for arg in args)


def test_peer_flags_are_the_serving_flags_with_tools_and_server_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUCERNA_CUDA_ARCHS", "90")  # no nvidia-smi query in a unit test
    for backend in ("cpu", "cuda"):
        serving, peer = flags(cmake_args(backend)), flags(peer_cmake_args(backend))
        assert peer.pop("LLAMA_BUILD_TOOLS") == "ON" and peer.pop("LLAMA_BUILD_SERVER") == "ON"
        # No web UI from npm, and none downloaded: the build needs no network.
        assert peer.pop("LLAMA_BUILD_UI") == "OFF" and peer.pop("LLAMA_USE_PREBUILT_UI") == "OFF"
        assert peer["LLAMA_OPENSSL"] == "OFF"
        # Everything else (build type, shared libs, backend, CUDA archs) as served.
        serving.pop("LLAMA_BUILD_TOOLS")
        serving.pop("LLAMA_BUILD_SERVER")
        assert peer == serving
        assert len(peer_cmake_args(backend)) == len(set(peer_cmake_args(backend)))


def test_peer_builds_apart_from_the_serving_engine() -> None:
    # The serving build (build-cpu, its stamp and flags) is never touched by the peer's.
    assert peer_build_dir("cpu") == engine_root(ENGINE_PIN) / "build-cpu-peer"
    assert PEER_TARGETS == ("llama-server", "llama-bench")


@pytest.fixture(scope="module")
def llama_server() -> Path:
    return ensure_llama_server(progress=lambda message: None).server


@pytest.mark.slow
def test_the_default_peer_is_built_from_the_pristine_checked_tree(llama_server: Path) -> None:
    """The same fetch and sha256 check as the engine (one source for the pin), without
    the patch step: its build tree is the unpacked sdist, its stamp the sdist's sha256."""
    build = ensure_llama_server(progress=lambda message: None)
    assert build.variant == "pristine" and build.patches == () and build.series == ""
    cache = (build.build_dir / "CMakeCache.txt").read_text()
    source = ensure_engine_source(progress=lambda message: None)
    assert source == engine_root(ENGINE_PIN) / "src"
    assert f"CMAKE_HOME_DIRECTORY:INTERNAL={source}\n" in cache
    stamp = json.loads((build.build_dir / "lucerna-peer.json").read_text())
    assert stamp["sha256"] == ENGINE_PIN.sha256 and stamp["args"] == peer_cmake_args(build.backend)


@pytest.mark.slow
def test_every_flag_we_pass_is_one_llama_server_knows(llama_server: Path) -> None:
    help_text = subprocess.run([str(llama_server), "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    argv = llama_server_argv(llama_server, ServerSettings(Path("m.gguf"), 4096, 2), 1, "m")
    for flag in (arg for arg in argv[1:] if arg.startswith("--")):
        assert flag in help_text, flag
    assert (llama_server.parent / "llama-bench").exists()


@pytest.mark.slow
async def test_peer_serves_the_default_model_to_the_bench_client(
        llama_server: Path, default_model: Path, tmp_path: Path) -> None:
    port = free_port()
    argv = llama_server_argv(llama_server, ServerSettings(default_model, 1024, 2), port, "m")
    server = ServerProcess("llama-server", argv, port, tmp_path / "llama-server.log")
    try:
        server.wait_healthy(120)
        async with httpx.AsyncClient(timeout=60) as client:
            timing = await stream_request(
                client, Endpoint("peer", server.base_url, "m", extra_body={"cache_prompt": False}),
                code_prompts()[0], max_tokens=4)
        assert timing.ok, timing.error
        assert timing.completion_tokens == 4 and (timing.prompt_tokens or 0) > 10
    finally:
        server.stop()
