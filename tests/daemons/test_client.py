"""The Trio client against real daemons on the real default model."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from daemons.client import open_daemon
from daemons.errors import DaemonDiedError, DaemonReplyError, DaemonStartError
from daemons.native import NativeBuild
from daemons.roles import DaemonLaunch, role_named


def launch(native: NativeBuild, model: Path, role: str = "qwen35") -> DaemonLaunch:
    return DaemonLaunch(role=role_named(role), executable=native.binary(role), model=model,
                        n_ctx=1024)


async def test_ready_line_describes_the_default_model(
    native: NativeBuild, default_model: Path,
) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        ready = daemon.ready
        assert ready is not None
        assert (ready.protocol, ready.role, ready.arch) == (1, "qwen35", "gemma3")
        assert ready.n_vocab == 262144
        assert ready.n_ctx == 1024
        assert {"generate", "tokenize", "detokenize", "vocab", "stats", "quit"} <= (
            ready.capabilities)
    assert daemon.returncode == 0
    assert daemon.intentional_exit


async def test_greedy_generation_is_real_and_deterministic(
    native: NativeBuild, default_model: Path,
) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        prompt = await daemon.tokenize("The capital of France is the city of")
        runs = []
        for _ in range(2):
            async with daemon.generate(prompt, 8) as stream:
                runs.append(await stream.collect())
            assert stream.summary is not None
            assert stream.summary.n_prompt == len(prompt)
        assert runs[0] == runs[1]
        assert stream.summary is not None
        assert len(runs[0]) == 8 or stream.summary.finish == "eog"
        text = await daemon.detokenize(runs[0])
        assert "Paris" in text  # a real model, not random tokens


async def test_leaving_a_generation_early_leaves_the_daemon_usable(
    native: NativeBuild, default_model: Path,
) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        prompt = await daemon.tokenize("Once upon a time")
        async with daemon.generate(prompt, 200, ignore_eos=True) as stream:
            first = []
            async for token in stream:
                first.append(token)
                if len(first) == 3:
                    break
        async with daemon.generate(prompt, 3) as stream:
            again = await stream.collect()
        assert again == first


async def test_reply_errors_are_typed(native: NativeBuild, default_model: Path) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        with pytest.raises(DaemonReplyError) as bad_token:
            async with daemon.generate([10**9], 4) as stream:
                await stream.collect()
        assert bad_token.value.code == "bad_token"
        # The daemon is still in step with us afterwards.
        assert await daemon.tokenize("ok")


async def test_wrong_architecture_is_refused_at_start(
    native: NativeBuild, test_models: dict[str, Path],
) -> None:
    with pytest.raises(DaemonStartError, match="wrong_arch"):
        async with open_daemon(launch(native, test_models["laguna"], role="qwen35")):
            pass


async def test_missing_executable_is_a_start_error(default_model: Path, tmp_path: Path) -> None:
    spec = DaemonLaunch(role=role_named("qwen35"), executable=tmp_path / "nope",
                        model=default_model)
    with pytest.raises(DaemonStartError, match="could not execute"):
        async with open_daemon(spec):
            pass


async def test_death_mid_generation_raises_instead_of_hanging(
    native: NativeBuild, default_model: Path,
) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        prompt = await daemon.tokenize("Count to one thousand:")
        with trio.fail_after(20), pytest.raises(DaemonDiedError, match="SIGKILL") as died:
            async with daemon.generate(prompt, 900, ignore_eos=True) as stream:
                async for _ in stream:
                    os.kill(daemon.pid, signal.SIGKILL)
        assert died.value.returncode == -signal.SIGKILL
        assert daemon.exited.is_set()
        assert not daemon.intentional_exit
        with pytest.raises(DaemonDiedError):
            await daemon.tokenize("anyone there?")


async def test_logprobs_come_with_their_tokens(native: NativeBuild, default_model: Path) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        prompt = await daemon.tokenize("The capital of France is the city of")
        async with daemon.generate(prompt, 6) as stream:
            plain = await stream.collect()
        records = []
        async with daemon.generate(prompt, 6, logprobs=3) as stream:
            async for token in stream:
                assert stream.logprobs is not None and stream.logprobs.token == token
                records.append(stream.logprobs)
        assert [r.token for r in records] == plain
        assert all(r.top[0][0] == r.token and len(r.top) == 3 for r in records)
        # Left after one record: cancel drains records, and bare ids follow cleanly.
        async with daemon.generate(prompt, 200, ignore_eos=True, logprobs=20) as stream:
            async for _ in stream:
                break
        async with daemon.generate(prompt, 6) as stream:
            assert await stream.collect() == plain


async def test_prompt_logprobs_come_before_the_generated_tokens(
    native: NativeBuild, default_model: Path
) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        prompt = await daemon.tokenize("The capital of France is the city of")
        async with daemon.generate(prompt, 0, logprobs=2, prompt_logprobs=True) as stream:
            scored = await stream.read_prompt_logprobs()
            assert await stream.collect() == []
        assert [r.token for r in scored] == prompt[1:] and all(len(r.top) == 2 for r in scored)
        assert stream.summary is not None and stream.summary.n_gen == 0
        async with daemon.generate(prompt, 4, logprobs=2) as stream:
            plain = await stream.collect()
        # Iterating alone sets the prompt's records aside: the tokens are the generated ones.
        async with daemon.generate(prompt, 4, logprobs=2, prompt_logprobs=True) as stream:
            assert await stream.collect() == plain
        assert stream.prompt_logprobs == scored
        # Left after the prompt's records: cancel drains the rest, and the next is clean.
        async with daemon.generate(prompt, 200, ignore_eos=True, logprobs=1,
                                   prompt_logprobs=True) as stream:
            assert len(await stream.read_prompt_logprobs()) == len(prompt) - 1
        async with daemon.generate(prompt, 4) as stream:
            assert await stream.collect() == plain


async def test_embed_rows_per_input(native: NativeBuild, default_model: Path) -> None:
    async with open_daemon(launch(native, default_model)) as daemon:
        a, b = await daemon.tokenize("a red apple"), await daemon.tokenize("the stock market")
        rows = await daemon.embed([a, b, a])
        assert rows.shape == (3, 640) and rows.dtype == "float32"
        assert (rows[0] == rows[2]).all() and not (rows[0] == rows[1]).all()
        assert ((await daemon.embed([b], pooling="last"))[0] != rows[1]).any()
        with pytest.raises(ValueError, match="length"):
            await daemon.embed([a, []])  # refused before it is sent
        with pytest.raises(DaemonReplyError) as info:
            await daemon.embed([[262144]])
        assert info.value.code == "bad_token"
