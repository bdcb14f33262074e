"""``--deterministic=on`` (PROTOCOL.md section 1, issue 21): greedy tokens that do not
depend on how the engine batches them.

With the daemon's defaults a row of a matmul or of attention is computed by another
kernel, or summed in another order, depending on the other rows of its batch (the CPU
backend's tinyBLAS for 2+ rows against vec_dot for one, repacked Q4_K gemm for groups
of 4 rows, tiled Q6_K matmul from 8 rows, tiled flash attention from a tile of
queries; measured one by one in docs/deterministic.md). So a prompt prefilled in other
chunks, a token verified in a speculative block or decoded beside other sequences may
round differently and, at a near-tie, change a greedy token. The deterministic mode
switches the engine to one kernel per op for every batch (engine patch 0201), and these
tests assert the result exactly, token for token, on every path that changes the batch:

- the reference is each prompt decoded alone with the prompt in one batch
  (``--chunk=512``), then one token a step;
- prefill chunks of 1 (plain autoregressive decoding), 7, 64 and 512 tokens, each with
  8 sequences decoded together (``--parallel=8``, protocol 2, PROTOCOL.md 9; one KV
  stream per sequence, ``--kv-unified=off``, which the mode requires there);
- a restore: the prompt's first part computed by an earlier request and reused from
  its checkpoint (PROTOCOL.md 5.10);
- speculative decoding with the DFlash test draft (16-token verify blocks, 5.9).

32 random prompts of 128 tokens, 8 greedy tokens each, on the qwen3, qwen35 and laguna
test models and gemma3-270m (Q4_K_M). To keep CI quick, chunks of 1 (one engine step
per prompt token) run the first 8 prompts (one wave of 8 concurrent sequences);
bin/greedy-divergence measures 16 prompts x 64 tokens on every path and model
(docs/benchmarks.md, "Greedy divergence and the deterministic mode").
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.native.test_batching import Lanes
from tests.native.test_dflash import oracle_schedule

DETERMINISTIC = "--deterministic=on"
ONE_THREAD = "--threads=1"
N_PROMPTS = 32
PROMPT_TOKENS = 128
N_GEN = 8
PARALLEL = 8
CHUNKS = (1, 7, 64, 512)
REFERENCE_CHUNK = 512
# Cells per sequence: the prompt, the continuation and a restore's extra tokens.
N_CTX_SEQ = 256
MODELS = [("qwen35", "qwen3"), ("qwen35", "qwen35"), ("laguna", "laguna"), ("qwen35", "gemma3")]


def prompts(n: int) -> list[list[int]]:
    """``n`` random prompts of PROMPT_TOKENS ids, valid in every test model's vocabulary."""
    rng = random.Random(21)
    return [[rng.randrange(10, 5000) for _ in range(PROMPT_TOKENS)] for _ in range(n)]


def ids(tokens: list[int]) -> str:
    return "ids:" + ",".join(map(str, tokens))


def generate(prompt: list[int], *words: str) -> str:
    return " ".join([f"generate {ids(prompt)} {N_GEN} ignore_eos=1", *words])


def alone(daemon: Any, cases: list[list[int]]) -> list[list[int]]:
    """Each prompt decoded alone from an empty sequence."""
    out = []
    for prompt in cases:
        tokens, reply = daemon.stream_command(generate(prompt, "reuse=0"))
        assert daemon.ok(reply, "generate")["n_gen"] == str(N_GEN), reply
        out.append(tokens)
    return out


def together(daemon: Any, cases: list[list[int]]) -> list[list[int]]:
    """The prompts in waves of PARALLEL sequences decoded together (protocol 2)."""
    lanes = Lanes(daemon)
    out: list[list[int]] = []
    for start in range(0, len(cases), PARALLEL):
        wave = cases[start:start + PARALLEL]
        for seq, prompt in enumerate(wave):
            lanes.start(generate(prompt, "reuse=0"), seq)
        lanes.wait_done(set(range(len(wave))))
        out += [lanes.tokens[seq] for seq in range(len(wave))]
    return out


def model_path(name: str, test_models: dict[str, Path], default_model: Path) -> Path:
    return default_model if name == "gemma3" else test_models[name]


@pytest.mark.parametrize(("role", "model"), MODELS, ids=[m for _, m in MODELS])
def test_greedy_tokens_do_not_depend_on_the_batch(
    spawn: Any, native: Any, test_models: dict[str, Path], default_model: Path, role: str,
    model: str,
) -> None:
    path = model_path(model, test_models, default_model)
    binary = native.binary(role)
    cases = prompts(N_PROMPTS)
    daemon = spawn(binary, path, ONE_THREAD, DETERMINISTIC, f"--chunk={REFERENCE_CHUNK}",
                   f"--n-ctx={N_CTX_SEQ}")  # fmt: skip
    assert daemon.ready()["deterministic"] == "1"
    reference = alone(daemon, cases)

    # A restore: the first 2/3 of the prompt come from an earlier request's checkpoint
    # (a mark inside the shared part), the rest is prefilled after it.
    shared, mark = 2 * PROMPT_TOKENS // 3, PROMPT_TOKENS // 2
    for prompt, want in zip(cases, reference, strict=True):
        # (Not reuse=0: that keeps no checkpoint; the prompts share no prefix anyway.)
        _, reply = daemon.stream_command(f"generate {ids(prompt[:shared])} 2 ignore_eos=1 "
                                         f"marks={mark}")  # fmt: skip
        daemon.ok(reply, "generate")
        tokens, reply = daemon.stream_command(generate(prompt, f"marks={mark}"))
        assert int(daemon.ok(reply, "generate")["n_cached"]) >= mark, reply
        assert tokens == want, f"{model}: a restored prompt decodes other tokens"
    assert daemon.quit() == 0

    for chunk in CHUNKS:
        # One KV stream per sequence, as the mode requires with several (PROTOCOL.md 1).
        batched = spawn(binary, path, ONE_THREAD, DETERMINISTIC, f"--chunk={chunk}",
                        f"--parallel={PARALLEL}", "--kv-unified=off",
                        f"--n-ctx={PARALLEL * N_CTX_SEQ}")  # fmt: skip
        batched.ready()
        # Chunks of 1 are a step per prompt token: one wave of sequences keeps it quick.
        got = together(batched, cases[:PARALLEL] if chunk == 1 else cases)
        for index, (tokens, want) in enumerate(zip(got, reference[:len(got)], strict=True)):
            assert tokens == want, (f"{model}: prompt {index} prefilled in chunks of {chunk} "
                                    f"beside {PARALLEL - 1} other sequences")
        assert batched.quit() == 0


@pytest.mark.slow
def test_speculative_decoding_is_autoregressive_decoding(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # The F16 qwen35 test model and the daemon's defaults but for the mode: no F32 copy,
    # no F32 cache (tests/native/test_dflash.py needs those without the mode).
    cases = prompts(N_PROMPTS)
    common = (ONE_THREAD, DETERMINISTIC, f"--n-ctx={N_CTX_SEQ}")
    plain = spawn(native.binary("qwen35"), test_models["qwen35"], *common)
    plain.ready()
    reference = alone(plain, cases)
    assert plain.quit() == 0
    spec = spawn(native.binary("qwen35"), test_models["qwen35"], *common,
                 f"--draft={test_models['dflash']}")
    assert spec.ready()["spec"] == "dflash"
    # The tokens did come from verify blocks, every one but the first (the prefill's) and
    # the last (a plain step): the documented schedule, at acceptance length 1 since the
    # random draft is never right here.
    schedule = oracle_schedule(1.0, N_GEN)
    for index, (prompt, want) in enumerate(zip(cases, reference, strict=True)):
        tokens, reply = spec.stream_command(generate(prompt, "reuse=0"))
        fields = spec.ok(reply, "generate")
        assert tokens == want, f"prompt {index}: speculative tokens are not the autoregressive ones"
        assert (int(fields["draft_steps"]), int(fields["draft_proposed"]),
                int(fields["draft_accepted"])) == schedule, (index, fields)
    assert spec.quit() == 0
