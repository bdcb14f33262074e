"""The ds4 shard (PROTOCOL.md 5.8) driven over raw pipes: the engine's ggml RPC
server on a local port, a deepseek4 target that keeps its routed experts there and
generates what one process generates, and the shard's own startup and shutdown.

Every process gets ``--threads=1``: two ggml CPU thread pools spinning on a 2-core
box (target and shard) slow each other down a hundredfold.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port

THREADS = "--threads=1"
EXPERTS_ON_SHARD = "--override-tensor=ffn_.*_exps=RPC0"


def start_shard(spawn: Any, native: Any, model: Path, port: int) -> Any:
    shard = spawn(native.binary("ds4_shard"), model, f"--rpc-listen=127.0.0.1:{port}", THREADS)
    ready = shard.ready()
    assert ready["rpc"] == f"127.0.0.1:{port}" and ready["device"] == "CPU"
    return shard


def greedy(daemon: Any, n_gen: int = 12) -> list[int]:
    prompt, _ = daemon.stream_command(
        "tokenize text:Experts%20can%20live%20on%20another%20machine."
    )
    tokens: list[int]
    tokens, reply = daemon.stream_command(
        "generate ids:" + ",".join(map(str, prompt)) + f" {n_gen} ignore_eos=1"
    )
    assert daemon.ok(reply, "generate")["n_gen"] == str(n_gen)
    return tokens


def rpc_bytes(stats: dict[str, str]) -> int:
    return sum(int(v) for k, v in stats.items() if k.startswith("buft_rpc0_"))


@pytest.fixture
def deepseek4(test_models: dict[str, Path]) -> Path:
    return test_models["deepseek4"]


def test_the_shard_listens_and_names_its_device(spawn: Any, native: Any, deepseek4: Path) -> None:
    port = free_port()
    shard = start_shard(spawn, native, deepseek4, port)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the ready line came after the port accepted connections
    stats = shard.ok(shard.command("stats"), "stats")
    assert int(stats["rss_kb"]) > 0
    # Where weights live (PROTOCOL.md 5.3, 5.8): what clients took since it listened, on
    # the device it serves, here the CPU's buffer type; nothing on a device.
    assert [key for key in stats if key.startswith("buft_")] == ["buft_cpu_bytes"]
    assert stats["buft_cpu_bytes"] == stats["bytes_host"] and stats["bytes_device"] == "0"
    assert shard.quit() == 0


@pytest.mark.parametrize(
    "layers",
    [
        # Every layer on this host's CPU, only the experts on the shard: the real split.
        "--n-gpu-layers=0",
        # PROTOCOL.md 5.8's command as written: on a CPU build the RPC device is the only
        # accelerator, so it takes the offloaded layers too (core/placement.h).
        None,
    ],
)
def test_experts_on_the_shard_generate_the_tokens_of_one_process(
    layers: str | None, spawn: Any, native: Any, deepseek4: Path
) -> None:
    alone = spawn(native.binary("laguna"), deepseek4, "--n-ctx=256", THREADS)
    assert alone.ready()["arch"] == "deepseek4"
    expected = greedy(alone)
    plain = alone.ok(alone.command("stats"), "stats")
    assert plain["bytes_device"] == "0" and rpc_bytes(plain) == 0
    assert alone.quit() == 0

    port = free_port()
    shard = start_shard(spawn, native, deepseek4, port)
    args = [f"--rpc=127.0.0.1:{port}", EXPERTS_ON_SHARD, THREADS, "--n-ctx=256"]
    target = spawn(native.binary("laguna"), deepseek4, *args, *([layers] if layers else []))
    assert target.ready()["backend"] == "cpu"  # the local backend; stats say what is remote
    assert greedy(target) == expected

    stats = target.ok(target.command("stats"), "stats")
    on_shard = rpc_bytes(stats)
    assert on_shard > 0 and int(stats["bytes_device"]) == on_shard
    # Nothing is lost or counted twice: host + shard is the whole model.
    assert int(stats["bytes_host"]) + on_shard == int(plain["bytes_host"])
    if layers == "--n-gpu-layers=0":
        experts = expert_bytes(deepseek4)
        assert experts <= on_shard < experts + 64 * 9  # 9 expert tensors, each padded
    # The shard's side: what the target keeps there is written, so resident, on top of
    # the compute buffers its graphs run in (growth since the shard listened).
    held = shard.ok(shard.command("stats"), "stats")
    assert int(held["bytes_host"]) >= on_shard
    assert held["buft_cpu_bytes"] == held["bytes_host"] and held["bytes_device"] == "0"
    assert target.quit() == 0


def expert_bytes(model: Path) -> int:
    import re

    from gguf import GGUFReader

    pattern = re.compile(r"ffn_.*_exps")
    return sum(int(t.n_bytes) for t in GGUFReader(model).tensors if pattern.search(t.name))


def test_wrong_arch_is_refused_before_listening(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    port = free_port()
    shard = spawn(
        native.binary("ds4_shard"), test_models["qwen3"], f"--rpc-listen=127.0.0.1:{port}"
    )
    line = shard.readline()
    assert line.startswith("err wrong_arch lucerna-ds4-shard serves deepseek4; ")
    assert shard.wait() == 3
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_port_in_use_is_rpc_failed(spawn: Any, native: Any, deepseek4: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        shard = spawn(native.binary("ds4_shard"), deepseek4, f"--rpc-listen=127.0.0.1:{port}")
        line = shard.readline()
        assert shard.err(line) == "rpc_failed" and f"127.0.0.1:{port}" in line
        assert shard.wait() == 5
        assert shard.proc.stdout is not None and shard.proc.stdout.read() == b""


def test_a_host_that_is_not_an_ipv4_address_is_rpc_failed(
    spawn: Any, native: Any, deepseek4: Path
) -> None:
    shard = spawn(native.binary("ds4_shard"), deepseek4, "--rpc-listen=localhost:1")
    assert shard.err(shard.readline()) == "rpc_failed"
    assert shard.wait() == 5


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--rpc-listen=127.0.0.1", "bad_flag"),  # no port
        ("--rpc-listen=127.0.0.1:70000", "bad_flag"),
        ("--rpc=127.0.0.1:1", "bad_flag"),  # a target flag
        ("--experts-in-host=0.5", "bad_flag"),  # laguna's
    ],
)
def test_bad_shard_flags(
    flag: str, expected: str, spawn: Any, native: Any, deepseek4: Path
) -> None:
    shard = spawn(native.binary("ds4_shard"), deepseek4, flag)
    assert shard.err(shard.readline()) == expected
    assert shard.wait() == 2


def test_quit_stops_the_server_even_with_a_target_connected(
    spawn: Any, native: Any, deepseek4: Path
) -> None:
    port = free_port()
    shard = start_shard(spawn, native, deepseek4, port)
    target = spawn(
        native.binary("laguna"),
        deepseek4,
        f"--rpc=127.0.0.1:{port}",
        EXPERTS_ON_SHARD,
        "--n-gpu-layers=0",
        THREADS,
        "--n-ctx=256",
    )
    target.ready()
    assert len(greedy(target, 2)) == 2  # the target's session is open on the shard
    started = time.monotonic()
    assert shard.quit(timeout=15) == 0
    assert time.monotonic() - started < 10
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_eof_on_stdin_stops_the_shard(spawn: Any, native: Any, deepseek4: Path) -> None:
    port = free_port()
    shard = start_shard(spawn, native, deepseek4, port)
    assert shard.proc.stdin is not None
    shard.proc.stdin.close()
    assert shard.wait(15) == 0
