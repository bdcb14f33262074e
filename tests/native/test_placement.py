"""Placement flags of target roles (PROTOCOL.md section 1): --rpc, --override-tensor
and laguna's --experts-in-host, observed through the `stats` fields bytes_host,
bytes_device and buft_<buffer type>_bytes.

On this CPU-only build every local weight is host memory, so "the device" of the
hot/cold split is a ggml RPC server on localhost (a ds4 shard, which serves its CPU):
without a local GPU the RPC device takes the offloaded layers (core/placement.h).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from tests.conftest import free_port

THREADS = "--threads=1"  # two CPU thread pools spinning on 2 cores slow each other badly
PROMPT = "ids:50,51,52,53,54,55,56,57"


@pytest.fixture(scope="module")
def shard_port(native: Any, test_models: dict[str, Path]) -> Any:
    """One shard for the module; targets connect to it one after the other."""
    from tests.native.conftest import Daemon

    port = free_port()
    shard = Daemon(
        native.binary("ds4_shard"),
        test_models["deepseek4"],
        f"--rpc-listen=127.0.0.1:{port}",
        THREADS,
    )
    try:
        shard.ready()
        yield port
        assert shard.quit() == 0
    finally:
        shard.close()


def run_target(
    spawn: Any, native: Any, model: Path, *flags: str
) -> tuple[list[int], dict[str, str]]:
    """Greedy tokens and the stats of one laguna daemon started with `flags`."""
    daemon = spawn(native.binary("laguna"), model, "--n-ctx=256", THREADS, *flags)
    daemon.ready()
    tokens, reply = daemon.stream_command(f"generate {PROMPT} 10 ignore_eos=1")
    daemon.ok(reply, "generate")
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert daemon.quit() == 0
    return tokens, stats


def layer_expert_bytes(model: Path) -> dict[int, int]:
    """Bytes of the expert tensors (ffn_*_exps) of each MoE layer, from the GGUF."""
    pattern = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps")
    out: dict[int, int] = {}
    for tensor in GGUFReader(model).tensors:
        if match := pattern.search(tensor.name):
            out[int(match[1])] = out.get(int(match[1]), 0) + int(tensor.n_bytes)
    return out


def test_plain_cpu_target_reports_its_weights_in_host_memory(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    _, stats = run_target(spawn, native, test_models["laguna"])
    buft = {key: int(value) for key, value in stats.items() if key.startswith("buft_")}
    assert stats["bytes_device"] == "0"
    assert int(stats["bytes_host"]) == sum(buft.values()) > 0
    assert all(re.fullmatch(r"buft_[a-z0-9_]+_bytes", key) for key in buft)


@pytest.mark.parametrize("model", ["laguna", "deepseek4"])
def test_experts_in_host_moves_a_share_of_moe_layers_off_the_device(
    model: str, shard_port: int, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    path = test_models[model]
    rpc = f"--rpc=127.0.0.1:{shard_port}"
    expected, _ = run_target(spawn, native, path)
    per_layer = layer_expert_bytes(path)
    moe_layers = sorted(per_layer)
    assert len(moe_layers) >= 2

    runs = {}
    for share in ("0", "0.5", "1"):
        tokens, stats = run_target(spawn, native, path, rpc, f"--experts-in-host={share}")
        assert tokens == expected, f"--experts-in-host={share} changed the greedy tokens"
        runs[share] = (int(stats["bytes_host"]), int(stats["bytes_device"]))
        assert int(stats["bytes_device"]) == sum(
            int(v) for k, v in stats.items() if k.startswith("buft_rpc0_")
        )

    total = sum(runs["0"])
    assert all(sum(run) == total for run in runs.values())  # moved, never copied
    assert runs["0"][1] > 0  # the layers live on the device
    # round(F * n) MoE layers, the first ones, keep their experts in host memory.
    for share, fraction in (("0.5", 0.5), ("1", 1.0)):
        n_host = int(fraction * len(moe_layers) + 0.5)
        moved = sum(per_layer[layer] for layer in moe_layers[:n_host])
        gained = runs[share][0] - runs["0"][0]
        assert moved <= gained < moved + 64 * 6 * n_host, (
            share,
            moved,
            gained,
        )  # alignment padding


def test_override_tensor_to_a_named_cpu_device(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    path = test_models["laguna"]
    expected, _ = run_target(spawn, native, path)
    tokens, stats = run_target(spawn, native, path, "--override-tensor=ffn_.*_exps=CPU")
    assert tokens == expected and stats["bytes_device"] == "0"


@pytest.mark.parametrize(
    ("flags", "code", "exit_code"),
    [
        (("--override-tensor=ffn_.*_exps",), "bad_flag", 2),  # no =DEVICE
        (("--override-tensor=ffn_(=CPU",), "bad_flag", 2),  # not a regex
        (("--override-tensor=ffn_.*_exps=NOPE0",), "bad_flag", 2),  # no such device
        (("--experts-in-host=1.5",), "bad_flag", 2),
        (("--experts-in-host=x",), "bad_flag", 2),
        (("--rpc=127.0.0.1",), "bad_flag", 2),
        (("--rpc-listen=127.0.0.1:5000",), "bad_flag", 2),  # the shard's flag
    ],
)
def test_bad_placement_flags(
    flags: tuple[str, ...],
    code: str,
    exit_code: int,
    spawn: Any,
    native: Any,
    test_models: dict[str, Path],
) -> None:
    daemon = spawn(native.binary("laguna"), test_models["laguna"], *flags)
    line = daemon.readline()
    assert daemon.err(line) == code, line
    assert daemon.wait() == exit_code


def test_experts_in_host_is_a_laguna_flag(spawn: Any, native: Any, default_model: Path) -> None:
    daemon = spawn(native.binary("qwen35"), default_model, "--experts-in-host=0.5")
    assert daemon.readline().startswith(
        "err bad_flag --experts-in-host is a flag of lucerna-laguna"
    )
    assert daemon.wait() == 2


def test_an_rpc_server_that_does_not_answer_is_rpc_failed(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # The engine's RPC client aborts the process on a dead endpoint; we must not.
    daemon = spawn(native.binary("laguna"), test_models["laguna"], f"--rpc=127.0.0.1:{free_port()}")
    line = daemon.readline()
    assert daemon.err(line) == "rpc_failed" and "does not accept connections" in line
    assert daemon.wait() == 5
