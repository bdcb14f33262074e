"""``generate ... logprobs=K prompt_logprobs=1`` (PROTOCOL.md 5.1), over raw pipes.

The prompt's records come first, one per prompt token after the first, then the
generated tokens'; ``n_gen=0`` scores a prompt alone. Such a prefill reuses no held
state and leaves the state any prefill leaves. Teacher forcing: scoring a prompt
followed by its own greedy continuation gives, for the continuation, what generation
reported, to the engine's batch rounding (a prompt row comes from a prefill batch, a
generated token's from a one-token decode; issue 21): the tests measure it.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

from protocol import LogprobStreamReader, TokenLogprobs
from tests.native.test_batching import Lanes
from tests.native.test_dflash import EXACT, exact_model, ids, prompts  # noqa: F401

ONE_THREAD = "--threads=1"
PROMPT = [9707, 1879, 11, 1207, 374, 279, 1850, 315, 9625, 30]

# Teacher forcing, a prompt row (prefill batch) against a generated token's (one-token
# decode). Measured on the 2-vCPU CPU box: F16 qwen3 test model up to 1.3e-3 (the same
# order as a verify row against a decode, PROTOCOL.md 5.9), F32 qwen35 setup up to
# 2.9e-6. The bounds leave a few times that.
F16_TOLERANCE = 1e-2
F32_TOLERANCE = 2e-5


def records(values: list[int], k: int) -> list[TokenLogprobs]:
    reader = LogprobStreamReader(k)
    out = reader.feed(struct.pack(f"<{len(values) + 1}i", *values, -1))
    assert reader.finished
    return out


def worst_difference(a: list[TokenLogprobs], b: list[TokenLogprobs]) -> float:
    """The largest difference of the chosen tokens' and the alternatives' values; the
    tokens and the alternatives' ids must be the same."""
    assert [r.token for r in a] == [r.token for r in b]
    assert [[i for i, _ in r.top] for r in a] == [[i for i, _ in r.top] for r in b]
    return max((abs(x - y) for ra, rb in zip(a, b, strict=True)
                for x, y in zip((ra.logprob, *(v for _, v in ra.top)),
                                (rb.logprob, *(v for _, v in rb.top)), strict=True)),
               default=0.0)


def test_prompt_records_come_first_and_score_each_prompt_token(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # --chunk=4: the prompt's records span three prefill chunks.
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--chunk=4", ONE_THREAD)
    daemon.ready()
    prompt = ids(PROMPT)
    values, reply = daemon.stream_command(f"generate {prompt} 0 logprobs=3 prompt_logprobs=1")
    fields = daemon.ok(reply, "generate")
    assert (fields["n_prompt"], fields["n_cached"], fields["n_gen"], fields["finish"]) == (
        "10", "0", "0", "length")
    scored = records(values, 3)
    assert [r.token for r in scored] == PROMPT[1:]
    for r in scored:
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in (r.logprob, *(v for _, v in r.top)))
        assert [v for _, v in r.top] == sorted((v for _, v in r.top), reverse=True)
        assert r.logprob <= r.top[0][1]
        # The chosen token among the alternatives carries the same value.
        assert all(v == r.logprob for i, v in r.top if i == r.token)

    # Held state is not used (it has no logits), whatever reuse says: the same prompt
    # again starts from an empty sequence and gives the same bytes.
    again, reply = daemon.stream_command(f"generate {prompt} 0 logprobs=3 prompt_logprobs=1")
    assert again == values and daemon.ok(reply, "generate")["n_cached"] == "0"

    # With generation: the prompt's records, then the generated tokens' as logprobs=K
    # alone gives them (same tokens; the values to batch rounding, since this prefill
    # computes its last layer over every row).
    plain, _ = daemon.stream_command(f"generate {prompt} 5 ignore_eos=1 logprobs=3 reuse=0")
    both, reply = daemon.stream_command(
        f"generate {prompt} 5 ignore_eos=1 logprobs=3 prompt_logprobs=1")
    assert daemon.ok(reply, "generate")["n_gen"] == "5"
    got = records(both, 3)
    assert got[:9] == scored
    print(f"generated after a scoring prefill vs a plain one: "
          f"{worst_difference(got[9:], records(plain, 3)):.3g}")
    assert worst_difference(got[9:], records(plain, 3)) <= F16_TOLERANCE

    # The state left behind is a prefill's: the next generate reuses it.
    tokens, reply = daemon.stream_command(f"generate {ids([*PROMPT, 13])} 3 ignore_eos=1")
    # All of it: the prompt (10 tokens) is shared, not cut back to a chunk edge (8).
    assert daemon.ok(reply, "generate")["n_cached"] == str(len(PROMPT)), reply
    cold, _ = daemon.stream_command(f"generate {ids([*PROMPT, 13])} 3 ignore_eos=1 reuse=0")
    assert tokens == cold

    # A one-token prompt has no record; K=0 records are the token's value alone.
    values, reply = daemon.stream_command(
        f"generate ids:{PROMPT[0]} 0 logprobs=0 prompt_logprobs=1")
    assert values == [] and daemon.ok(reply, "generate")["n_gen"] == "0"
    values, _ = daemon.stream_command(f"generate {prompt} 0 logprobs=0 prompt_logprobs=1")
    assert records(values, 0) == [TokenLogprobs(r.token, r.logprob, ()) for r in scored]

    # Refusals, each with its -1 (restore's slot exists: the refusal is the option's).
    daemon.ok(daemon.command("snapshot 0"), "snapshot")
    for line in (f"generate {prompt} 0 logprobs=1", f"generate {prompt} 0",
                 f"generate {prompt} 1 prompt_logprobs=1",
                 f"generate {prompt} 1 prompt_logprobs=2 logprobs=1",
                 f"restore 0 {prompt} 1 logprobs=1 prompt_logprobs=1"):
        values, reply = daemon.stream_command(line)
        assert values == [] and daemon.err(reply) == "bad_args", line


def teacher_forcing(daemon: Any, prompt: list[int], n_gen: int, k: int) -> float:
    """Generate greedily with logprobs, score the prompt plus that continuation, and
    return the largest difference over the continuation's records."""
    values, _ = daemon.stream_command(
        f"generate {ids(prompt)} {n_gen} ignore_eos=1 logprobs={k} reuse=0")
    generated = records(values, k)
    tokens = [r.token for r in generated]
    values, _ = daemon.stream_command(
        f"generate {ids(prompt + tokens)} 0 logprobs={k} prompt_logprobs=1")
    scored = records(values, k)
    assert len(scored) == len(prompt) + len(tokens) - 1
    return worst_difference(scored[len(prompt) - 1:], generated)


def test_teacher_forcing_gives_the_generated_values(
    spawn: Any, native: Any, test_models: dict[str, Path], exact_model: Path  # noqa: F811
) -> None:
    f16 = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=512", ONE_THREAD)
    f32 = spawn(native.binary("qwen35"), exact_model, "--n-ctx=512", ONE_THREAD, *EXACT)
    f16.ready()
    f32.ready()
    worst16 = max(teacher_forcing(f16, p, 12, 3) for p in prompts(6, seed=5))
    worst32 = max(teacher_forcing(f32, p, 12, 3) for p in prompts(6, seed=5))
    print(f"teacher forcing, largest logprob difference: F16 qwen3 {worst16:.3g}, "
          f"F32 qwen35 {worst32:.3g}")
    assert worst16 <= F16_TOLERANCE
    assert worst32 <= F32_TOLERANCE


def test_a_sequence_of_a_parallel_daemon_scores_its_prompt(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # Protocol 2 (PROTOCOL.md 9.2): the same records as protocol 1's, framed, while
    # another sequence generates beside it; chunks of 4, so they span three chunks. In
    # the deterministic mode (one KV stream per sequence, as it needs with several) a
    # row does not depend on its batch, so the records are protocol 1's bit for bit.
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--chunk=4", ONE_THREAD,
                   "--parallel=2", "--deterministic=on", "--kv-unified=off")
    daemon.ready()
    prompt = ids(PROMPT)
    alone, reply = daemon.stream_command(f"generate {prompt} 3 ignore_eos=1 logprobs=3 "
                                         "prompt_logprobs=1")
    daemon.ok(reply, "generate")
    want = records(alone, 3)
    lanes = Lanes(daemon)
    lanes.start(f"generate {ids([40, 1079, 264, 3363])} 12 ignore_eos=1", 0)
    lanes.start(f"generate {prompt} 3 ignore_eos=1 logprobs=3 prompt_logprobs=1", 1)
    lanes.wait_done({0, 1})
    assert "n_gen=12 " in lanes.done[0] and "n_gen=3 " in lanes.done[1], lanes.done
    got = records([word for record in lanes.records[1] for word in record], 3)
    assert [r.token for r in got[:9]] == PROMPT[1:]
    assert got == want
    # Scoring alone generates nothing, and is not refused with seq=.
    lanes.start(f"generate {prompt} 0 logprobs=0 prompt_logprobs=1", 1)
    lanes.wait_done({1})
    assert "n_gen=0 " in lanes.done[1] and "finish=length" in lanes.done[1], lanes.done[1]
    scored = [word for record in lanes.records[1] for word in record][-9 * 2:]
    assert records(scored, 0) == [TokenLogprobs(r.token, r.logprob, ()) for r in want[:9]]
    assert daemon.quit() == 0
