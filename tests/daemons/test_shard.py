"""The ds4 shard (PROTOCOL.md 5.8): a device served over ggml RPC to a deepseek4 target."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import pytest

from daemons.client import open_daemon
from daemons.errors import DaemonReplyError, DaemonStartError
from daemons.roles import DaemonLaunch

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]
EXPERTS_ON_SHARD = ("ffn_.*_exps=RPC0",)


async def test_the_shard_ready_line_names_its_rpc_endpoint_and_device(
    launch: Launcher, unused_port: int
) -> None:
    address = f"127.0.0.1:{unused_port}"
    async with open_daemon(launch("ds4_shard", "deepseek4", rpc_listen=address)) as shard:
        ready = shard.ready
        assert ready is not None
        assert (ready.role, ready.arch) == ("ds4_shard", "deepseek4")
        assert ready.fields["rpc"] == address
        assert ready.fields["device"]  # a ggml device name, e.g. CPU or CUDA0
        assert ready.capabilities == {"stats", "quit"}
        assert int((await shard.stats())["rss_kb"]) > 0
        with pytest.raises(DaemonReplyError) as refused:
            await shard.tokenize("no tokenizer service here")
        assert refused.value.code == "unsupported"


async def test_experts_on_the_shard_give_the_tokens_of_one_process(
    launch: Launcher, unused_port: int, greedy: Greedy
) -> None:
    address = f"127.0.0.1:{unused_port}"
    async with open_daemon(launch("laguna", "deepseek4")) as alone:
        prompt = await alone.tokenize("Experts can live on another machine.")
        expected = await greedy(alone, prompt, 8)
    on_shard = launch("laguna", "deepseek4", rpc=(address,), override_tensors=EXPERTS_ON_SHARD)
    async with (
        open_daemon(launch("ds4_shard", "deepseek4", rpc_listen=address)),
        open_daemon(on_shard) as target,
    ):
        assert await greedy(target, prompt, 8) == expected


async def test_a_busy_port_is_rpc_failed(launch: Launcher) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        with pytest.raises(DaemonStartError, match="rpc_failed"):
            async with open_daemon(launch("ds4_shard", "deepseek4", rpc_listen=address)):
                pass
