"""Tensors across hosts: a target in one network namespace, a ds4 shard in another.

The target runs on host "far" (reached by ssh, on one channel, PROTOCOL.md 10); the
shard runs in namespace "shard" and serves its device over ggml RPC across the veth
between them (tests/_netns.py). Whether the shard holds a deepseek4 target's experts or
a whole layer of a laguna or qwen35 target, greedy decoding gives the tokens of one
process on one host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path, PurePosixPath

import pytest

from daemons.client import open_daemon
from daemons.roles import DaemonLaunch
from tests._netns import Hosts, open_hosts

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]
SHARD_PORT = 50052

PLACEMENTS = [
    # The routed experts of a DeepSeek V4 target on the shard (PROTOCOL.md 5.8).
    ("laguna", "deepseek4", ("ffn_.*_exps=RPC0",)),
    # A layer split: all of layer 1 on the shard, the rest here.
    ("laguna", "laguna", (r"blk\.1\.=RPC0",)),
    ("qwen35", "qwen35", (r"blk\.1\.=RPC0",)),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    with open_hosts(tmp_path_factory.mktemp("hosts")) as made:
        yield made


@pytest.mark.parametrize(("role", "model", "placement"), PLACEMENTS,
                         ids=[f"{role}-{model}" for role, model, _ in PLACEMENTS])
async def test_a_shard_on_another_host_gives_the_tokens_of_one_process(
    hosts: Hosts, launch: Launcher, greedy: Greedy, role: str, model: str,
    placement: tuple[str, ...],
) -> None:
    async with open_daemon(launch(role, model)) as alone:
        prompt = await alone.tokenize("Tensors can live on another machine.")
        expected = await greedy(alone, prompt, 8)

    address = f"{hosts.shard_address}:{SHARD_PORT}"
    shard = launch("ds4_shard", "deepseek4", rpc_listen=address, launcher=hosts.shard.ns_exec,
                   channel="stdout", host="shard", link_timeout_s=10.0)
    # Every layer on the target's CPU but what ``placement`` sends to the shard (on a CPU
    # build the RPC device is the only accelerator and would take offloaded layers too).
    target = launch(role, model, rpc=(address,), override_tensors=placement, n_gpu_layers=0,
                    launcher=hosts.far.ssh, remote_shell=True, channel="stdout", host="far",
                    scratch_dir=PurePosixPath("/tmp"), link_timeout_s=10.0)
    async with open_daemon(shard), open_daemon(target) as far:
        assert far.ready is not None and far.ready.arch == model
        assert await greedy(far, prompt, 8) == expected
        stats = await far.stats()
        on_shard = sum(int(v) for k, v in stats.items() if k.startswith("buft_rpc0_"))
        assert on_shard > 0, stats  # the placed tensors live across the link


def test_the_test_models_have_a_layer_1(test_models: dict[str, Path]) -> None:
    import gguf

    for model in ("laguna", "qwen35"):
        names = [t.name for t in gguf.GGUFReader(test_models[model]).tensors]
        assert any(name.startswith("blk.1.") for name in names), model
