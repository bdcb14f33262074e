"""Tensors across hosts: a target in one network namespace, a ds4 shard in another.

The target runs on host "far" (reached by ssh, on one channel, PROTOCOL.md 10); the
shard runs in namespace "shard" and serves its device over ggml RPC across the veth
between them (tests/_netns.py). Whether the shard holds a deepseek4 target's experts or
a whole layer of a laguna or qwen35 target, greedy decoding gives the tokens of one
process on one host. Cutting the link between target and shard mid-generation ends
the target within its RPC timeout; it cannot start while the link is down (unreachable),
and gives the same tokens once it is back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import PurePosixPath

import pytest
import trio

from daemons.client import open_daemon
from daemons.errors import DaemonDiedError, HostUnreachableError
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


async def test_a_cut_shard_link_ends_the_target_and_it_comes_back(
    hosts: Hosts, launch: Launcher, greedy: Greedy,
) -> None:
    # The ggml RPC link between target and shard has no keep-alive of its own: the
    # daemons' --rpc-timeout-ms makes the kernel fail a connection whose peer is gone.
    address = f"{hosts.shard_address}:{SHARD_PORT}"
    timeout = ("--rpc-timeout-ms=2000",)
    shard = launch("ds4_shard", "deepseek4", rpc_listen=address, launcher=hosts.shard.ns_exec,
                   channel="stdout", host="shard", extra_args=timeout)
    target = launch("laguna", "deepseek4", rpc=(address,), override_tensors=PLACEMENTS[0][2],
                    n_gpu_layers=0, n_ctx=4096, launcher=hosts.far.ssh, remote_shell=True,
                    channel="stdout", host="far", scratch_dir=PurePosixPath("/tmp"),
                    link_timeout_s=10.0, extra_args=timeout)
    async with open_daemon(shard):
        async with open_daemon(target) as far:
            prompt = await far.tokenize("The link to the shard will go.")
            expected = await greedy(far, prompt, 8)
            async with far.generate(prompt, 4000, ignore_eos=True) as stream:
                await stream.__anext__()
                hosts.cut_shard()
                cut_at = trio.current_time()
                with trio.fail_after(30), pytest.raises(DaemonDiedError):
                    async for _ in stream:
                        pass
                assert trio.current_time() - cut_at < 15  # 2 s of silence, then the abort
        try:
            # While it is cut, a target cannot reach its shard: unreachable, not a failure.
            with trio.fail_after(30), pytest.raises(HostUnreachableError, match="RPC server"):
                async with open_daemon(target):
                    pass
        finally:
            hosts.restore_shard()
        # The shard dropped its dead client and serves a new one: the same tokens.
        with trio.fail_after(60):
            async with open_daemon(target) as again:
                assert await greedy(again, prompt, 8) == expected
