"""``grammar=`` (PROTOCOL.md 5.1): every sampled token satisfies a GBNF grammar."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from daemons.client import open_daemon
from daemons.errors import DaemonReplyError
from daemons.roles import DaemonLaunch
from protocol import FinishReason, SamplingParams

Launcher = Callable[..., DaemonLaunch]
ANSWERS = ("yes", "no", "maybe")
ANSWER_GRAMMAR = "root ::= " + " | ".join(f'"{answer}"' for answer in ANSWERS)


async def test_a_grammar_limits_a_real_model_to_its_strings(launch: Launcher) -> None:
    async with open_daemon(launch("qwen35", "default")) as daemon:
        prompt = await daemon.tokenize("Question: is the sea salty? Answer with yes or no.\n")
        async with daemon.generate(prompt, 16, grammar=ANSWER_GRAMMAR) as stream:
            ids = await stream.collect()
        assert await daemon.detokenize(ids) in ANSWERS
        assert stream.summary is not None
        assert stream.summary.finish is FinishReason.STOP  # the grammar is complete


async def test_a_grammar_holds_on_every_role_greedy_sampled_and_restored(
    launch: Launcher, generating: tuple[str, str]
) -> None:
    async with open_daemon(launch(*generating)) as daemon:
        prompt = await daemon.tokenize("Pick one:")
        outputs = []
        for sampling in (None, SamplingParams(temp=1.5, seed=3)):
            async with daemon.generate(
                prompt, 8, sampling=sampling, grammar=ANSWER_GRAMMAR, snap=(len(prompt), 0)
            ) as stream:
                outputs.append(await stream.collect())
        async with daemon.restore(0, prompt, 8, grammar=ANSWER_GRAMMAR) as stream:
            outputs.append(await stream.collect())
        assert {await daemon.detokenize(ids) for ids in outputs} <= set(ANSWERS)


async def test_a_long_grammar_goes_through_a_file(launch: Launcher) -> None:
    words = [f"w{i:03d}x" for i in range(400)]
    grammar = "root ::= " + " | ".join(f'"{word}"' for word in words)
    assert len(grammar) > 2048  # more than the client writes inline
    async with open_daemon(launch("qwen35", "qwen3")) as daemon:
        prompt = await daemon.tokenize("Say a word:")
        async with daemon.generate(prompt, 16, grammar=grammar) as stream:
            ids = await stream.collect()
        assert await daemon.detokenize(ids) in words


async def test_a_grammar_that_does_not_parse_is_bad_grammar(launch: Launcher) -> None:
    async with open_daemon(launch("qwen35", "qwen3")) as daemon:
        prompt = await daemon.tokenize("Hello")
        with pytest.raises(DaemonReplyError) as refused:
            async with daemon.generate(prompt, 4, grammar='root ::= ("unclosed"') as stream:
                await stream.collect()
        assert refused.value.code == "bad_grammar"
        async with daemon.generate(prompt, 2, ignore_eos=True) as stream:
            assert len(await stream.collect()) == 2
