"""Prompt lookup (PROTOCOL.md 5.9, ``--lookup``, ``lookup=0|1``), over raw pipes.

Lossless means the tokens of autoregressive decoding. A verify row is computed in a
batch of up to 16 tokens and an autoregressive step in a batch of one, and the engine's
kernels round the two differently (issue 21), so token equality holds where the two
best logits of every step are further apart than that rounding. The tests measure both
instead of hoping: along the autoregressive path, the gap between the best and the
second-best log-probability (``logprobs=2``), and the rounding itself, as the change in
each generated token's log-probability when the same positions are computed in 16-token
batches (``prompt_logprobs=1``, the prompt prefilled as before and ``marks`` every 16
generated positions). They assert that at every step the gap is
at least ``MARGIN_FACTOR`` times the change (on gemma3 Q4_K_M changes reach 0.12, on the
F16 test models 1e-3, on the F32 setup 1e-6), then that lookup gives the
autoregressive tokens; a prompt whose path has a closer near-tie is not compared (only
batch-invariant kernels make those equal, issue 21), and at least half the prompts must qualify. The
setting: the qwen35 test model with F32 weights and F32 KV
cache, flash attention off (as tests/native/test_dflash.py), the qwen3 and laguna test
models (F16) with an F32 KV cache and flash attention off, and the real default model
(gemma3-270m, Q4_K_M, whose batched kernels differ most from the one-row ones) on a
prompt that asks it to repeat a code block, one thread each.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from protocol import LogprobStreamReader, TokenLogprobs
from tests.native.test_dflash import EXACT, exact_model, fields, ids  # noqa: F401

ONE_THREAD = "--threads=1"
N_GEN = 24
MARGIN_FACTOR = 3.0
CODE = '''def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def main():
    for i in range(10):
        print(i, fibonacci(i))
'''
REPEAT_CODE = (f"Here is a Python function:\n\n```python\n{CODE}```\n\nRepeat the code above "
               "exactly, character for character.\n\n```python\n")


def records(values: list[int], k: int) -> list[TokenLogprobs]:
    reader = LogprobStreamReader(k)
    out = reader.feed(struct.pack(f"<{len(values) + 1}i", *values, -1))
    assert reader.finished
    return out


def repeating_prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    """Random prompts whose end repeats an earlier stretch of them, so that lookup finds a
    match at once and verify steps (with their rollbacks) run whatever the model writes."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        block = [rng.randrange(0, vocab) for _ in range(24)]
        filler = [rng.randrange(0, vocab) for _ in range(rng.randrange(0, 12))]
        out.append([*block, *filler, *block[: rng.randrange(8, 16)]])
    return out


def gaps_and_rounding(
    ar: Any, prompt: list[int], n_gen: int
) -> tuple[list[int], list[float], list[float]]:
    """The AR tokens, the gap after each, and the change of its log-probability in a
    16-token batch (module docstring)."""
    values, _ = ar.stream_command(f"generate {ids(prompt)} {n_gen} ignore_eos=1 logprobs=2")
    steps = records(values, 2)
    tokens = [r.token for r in steps]
    gaps = [r.top[0][1] - r.top[1][1] for r in steps]
    # The prompt prefilled as before, then the generated positions 16 to a batch (the
    # marks split the prefill there); row p of prompt_logprobs predicts token p + 1.
    marks = ",".join(str(m) for m in range(len(prompt), len(prompt) + len(tokens), 16))
    line = (f"generate {ids(prompt + tokens)} 1 reuse=0 logprobs=0 prompt_logprobs=1 "
            f"ignore_eos=1 marks={marks}")
    values, _ = ar.stream_command(line)
    rows = records(values, 0)
    changes = [
        abs(rows[len(prompt) - 1 + j].logprob - steps[j].logprob) for j in range(len(tokens))
    ]
    assert [rows[len(prompt) - 1 + j].token for j in range(len(tokens))] == tokens
    return tokens, gaps, changes


def gaps_exceed_rounding(ar: Any, prompt: list[int], n_gen: int) -> tuple[list[int], bool]:
    """The AR tokens, and whether the precondition of token equality holds for them."""
    tokens, gaps, changes = gaps_and_rounding(ar, prompt, n_gen)
    return tokens, clear_of_rounding(gaps, changes)


def clear_of_rounding(gaps: list[float], changes: list[float]) -> bool:
    # A pick flips when the gap shrinks by more than itself; the chosen token's change is
    # measured, the runner-up's is not and is of the same size: hence a factor over 2.
    return all(g >= MARGIN_FACTOR * c for g, c in zip(gaps, changes, strict=True))


TARGETS = {
    # model, role, vocabulary to draw prompt ids from, extra flags of every daemon
    "qwen35": ("qwen35f32", "qwen35", 151000, EXACT),
    "qwen3": ("qwen3", "qwen35", 151000, EXACT),
    "laguna": ("laguna", "laguna", 50000, EXACT),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_lookup_gives_the_autoregressive_tokens(
    spawn: Any, native: Any, test_models: dict[str, Path], exact_model: Path, target: str  # noqa: F811
) -> None:
    name, role, vocab, extra = TARGETS[target]
    model = exact_model if name == "qwen35f32" else test_models[name]
    common = (model, "--n-ctx=512", ONE_THREAD, *extra)
    ar = spawn(native.binary(role), *common)
    # Matches of one token: random weights repeat little of their context, and every
    # proposal verified (mostly rejected, at every depth) is a rollback tested.
    lookup = spawn(native.binary(role), *common, "--lookup=on", "--lookup-min=1")
    ar.ready()
    ready = lookup.ready()
    assert (ready["spec"], ready["lookup"], ready["draft_block"]) == ("lookup", "on", "16")
    steps = accepted = compared = 0
    cases = repeating_prompts(8, vocab, seed=21)
    for prompt in cases:
        expected, exact = gaps_exceed_rounding(ar, prompt, N_GEN)
        tokens, reply = lookup.stream_command(f"generate {ids(prompt)} {N_GEN} ignore_eos=1")
        compared += exact
        assert tokens == expected or not exact, prompt
        got = lookup.ok(reply, "generate")
        assert got["spec"] == "lookup"
        steps += int(got["draft_steps"])
        accepted += int(got["draft_accepted"])
        # Opted out: autoregressive, and the reply says nothing was proposed.
        tokens, reply = lookup.stream_command(
            f"generate {ids(prompt)} {N_GEN} ignore_eos=1 lookup=0")
        assert tokens == expected  # the very arithmetic of autoregressive decoding
        assert (fields(reply)["spec"], fields(reply)["draft_steps"]) == ("none", "0")
    assert compared >= len(cases) // 2, compared
    # The qwen35 test model repeats no token of its context (measured: 64 distinct ids of
    # 64 from every prompt tried), so lookup has nothing to propose there; its verify and
    # rollback on the hybrid are the oracle's, tested at every depth in test_dflash.py.
    assert steps > 0 or target == "qwen35"
    stats = lookup.ok(lookup.command("stats"), "stats")
    assert int(stats["draft_steps"]) == steps and int(stats["draft_accepted"]) == accepted
    # A plain daemon refuses the opt-in: its context has no room for a verify block.
    _, reply = ar.stream_command(f"generate {ids(prompt)} 4 lookup=1")
    assert ar.err(reply) == "unsupported"
    for daemon in (ar, lookup):
        assert daemon.quit() == 0


def test_lookup_repeats_a_code_block_faster_on_the_default_model(
    spawn: Any, native: Any, default_model: Path
) -> None:
    """gemma3 (the real default model): the request to repeat a code block is accepted
    from the context, and the tokens are autoregressive decoding's."""
    common = (default_model, "--n-ctx=1024", ONE_THREAD)
    ar = spawn(native.binary("qwen35"), *common)
    lookup = spawn(native.binary("qwen35"), *common, "--lookup=opt-in")
    ar.ready()
    assert lookup.ready()["lookup"] == "opt-in"
    prompt, _ = ar.stream_command(f"tokenize text:{quote(REPEAT_CODE, safe='')}")
    expected, gaps, changes = gaps_and_rounding(ar, prompt, 48)
    # This prompt's path has no near-tie closer than the rounding.
    assert clear_of_rounding(gaps, changes), (
        [round(g, 3) for g in gaps], [round(c, 3) for c in changes])
    # opt-in: off unless the request asks.
    tokens, reply = lookup.stream_command(f"generate {ids(prompt)} 48 ignore_eos=1")
    assert tokens == expected and fields(reply)["spec"] == "none"
    tokens, reply = lookup.stream_command(f"generate {ids(prompt)} 48 ignore_eos=1 lookup=1")
    assert tokens == expected
    got = lookup.ok(reply, "generate")
    assert got["spec"] == "lookup" and int(got["draft_accepted"]) > 0, reply
    for daemon in (ar, lookup):
        assert daemon.quit() == 0


def test_lookup_flags_and_options_are_checked(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    model = test_models["qwen3"]
    for extra in (["--lookup=maybe"], ["--lookup-min=2"],
                  ["--lookup=on", "--lookup-min=33"]):
        daemon = spawn(native.binary("qwen35"), model, ONE_THREAD, *extra)
        assert daemon.err(daemon.readline()) == "bad_flag", extra
        assert daemon.wait() != 0
    daemon = spawn(
        native.binary("qwen35"), model, ONE_THREAD, "--lookup=on", "--draft-block-size=5")
    assert daemon.ready()["draft_block"] == "5"
    _, reply = daemon.stream_command("generate ids:1,2,3 4 lookup=2")
    assert daemon.err(reply) == "bad_args"
    # logprobs decode without proposals, as with a draft.
    _, reply = daemon.stream_command("generate ids:1,2,3,1,2,3,1,2,3 8 logprobs=1 lookup=1")
    assert (fields(reply)["spec"], fields(reply)["draft_steps"]) == ("none", "0")
    assert daemon.quit() == 0


def test_cancel_and_restore_with_lookup(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    """A cancel mid-verify leaves a clean sequence, and a restore decodes with lookup as
    a generate does (the tokens compared are the same daemon's, so same arithmetic)."""
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=2048", ONE_THREAD,
                   "--lookup=on", "--lookup-min=1", "--slots=2")
    daemon.ready()
    prompt = repeating_prompts(1, 151000, seed=5)[0]
    expected, _ = daemon.stream_command(f"generate {ids(prompt)} 16 ignore_eos=1")
    daemon.send(f"generate {ids(prompt)} 1500 ignore_eos=1")
    first = daemon.read_value()
    daemon.send("cancel")
    rest = daemon.read_stream()
    assert daemon.ok(daemon.readline(), "generate")["finish"] == "cancelled"
    assert daemon.ok(daemon.readline(), "cancel")["running"] == "1"
    got = [first, *rest]
    assert got[: min(len(got), 16)] == expected[: min(len(got), 16)]
    assert daemon.stream_command(f"generate {ids(prompt)} 16 ignore_eos=1")[0] == expected
    # A snapshot of the prompt, restored: the same tokens, lookup running.
    daemon.stream_command(f"generate {ids(prompt)} 1 snap={len(prompt)}:0")
    tokens, reply = daemon.stream_command(f"restore 0 {ids(prompt)} 16 ignore_eos=1")
    assert tokens == expected and fields(reply)["spec"] == "lookup"
    assert daemon.quit() == 0
