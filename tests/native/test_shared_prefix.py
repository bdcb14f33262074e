"""Concurrent conversations that share a system prompt share its prefix (issue 13 item 5;
PROTOCOL.md 9.7): a generation on one sequence takes the prefix another sequence holds
(attention cells shared with llama_memory_seq_cp, the recurrent state or window cache
from that sequence's checkpoint at the system prompt's mark) and prefills only the rest.

Which tokens (issue 21 item 3), with the daemon's defaults: run one after the other, the
second conversation gives bit for bit the tokens and logprobs of a ``--parallel 1``
daemon's cold run of its prompt, with the same chunks and marks: measured on qwen3,
qwen35 and gemma3 (the shared cells are the ones the first run wrote, in position order;
the checkpoint holds the exact state at the mark), and asserted exactly here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.native.test_batching import ONE_THREAD, Lanes, assert_near_solo, ids, model_path, solo

SYSTEM = [2610, 525, 264, 10950, 17847, 13, 22043, 279, 2701, 1467, 11, 3270, 264, 1273, 13, 576,
          8678, 374, 1602, 5538, 11, 773]  # fmt: skip
QUESTIONS = [[40, 1079, 264, 3363], [785, 3974, 13876, 38835, 34208, 916]]
N = 24


def line(question: list[int]) -> str:
    prompt = SYSTEM + question
    return f"generate {ids(prompt)} {N} ignore_eos=1 logprobs=2 marks={len(SYSTEM)}"


@pytest.mark.parametrize("model", ["qwen3", "qwen35", "gemma3"])
def test_a_second_conversation_takes_the_system_prompt_from_the_first(
    spawn: Any, native: Any, test_models: dict[str, Path], default_model: Path, model: str
) -> None:
    binary, path = native.binary("qwen35"), model_path(model, test_models, default_model)
    cold = spawn(binary, path, ONE_THREAD, "--chunk=8")
    cold.ready()
    want = []
    for question in QUESTIONS:
        values, reply = cold.stream_command(line(question) + " reuse=0")
        assert "n_cached=0 " in reply, reply
        want.append(values)
    assert cold.quit() == 0

    daemon = spawn(binary, path, ONE_THREAD, "--chunk=8", "--parallel=2")
    daemon.ready()
    lanes = Lanes(daemon)
    for seq, question in enumerate(QUESTIONS):
        lanes.start(line(question), seq)
        lanes.wait_done({seq})
        got = [word for record in lanes.records[seq] for word in record]
        assert got == want[seq], (model, seq)
    assert "n_cached=0 " in lanes.done[0], lanes.done[0]
    assert f"n_cached={len(SYSTEM)} " in lanes.done[1], lanes.done[1]
    stats = daemon.ok(lanes.command("stats"), "stats")
    assert stats["shared_prefixes"] == "1", stats
    assert daemon.quit() == 0


@pytest.mark.parametrize("model", ["qwen3", "qwen35"])
def test_a_running_conversation_shares_its_system_prompt(
    spawn: Any, native: Any, test_models: dict[str, Path], model: str
) -> None:
    # Decoded beside the first, the second is held to test_batching's rule (near its solo
    # run, the F16 test models) rather than exactly.
    binary, path = native.binary("qwen35"), test_models[model]
    lines = [line(question) for question in QUESTIONS]
    want = solo(spawn, binary, path, [f"{text} reuse=0" for text in lines])
    daemon = spawn(binary, path, ONE_THREAD, "--chunk=8", "--parallel=2")
    daemon.ready()
    lanes = Lanes(daemon)
    lanes.start(lines[0].replace(f" {N} ", " 200 "), 0)
    while len(lanes.tokens.get(0, [])) < 4:  # its prefill, with the mark's checkpoint, is done
        lanes.pump_stream(timeout=0.05)
    lanes.start(lines[1], 1)
    assert 0 not in lanes.done  # the first still runs
    lanes.wait_done({1})
    assert f"n_cached={len(SYSTEM)} " in lanes.done[1], lanes.done[1]
    assert_near_solo(want[1], lanes.records[1], f"{model} beside a running one", greedy=True)
    assert daemon.ok(lanes.command("stats"), "stats")["shared_prefixes"] == "1"
    lanes.wait_done({0})
    assert "n_gen=200 " in lanes.done[0], lanes.done[0]
    assert daemon.quit() == 0


@pytest.mark.parametrize("model", ["qwen3", "qwen35"])
def test_with_one_kv_stream_per_sequence_nothing_is_shared(
    spawn: Any, native: Any, test_models: dict[str, Path], default_model: Path, model: str
) -> None:
    # --kv-unified=off: the engine copies between KV streams only whole, and sharing a
    # prefix across them aborted the daemon (GGML_ASSERT in llama_memory_seq_cp); each
    # sequence then prefills its own, with the tokens of a cold run.
    binary, path = native.binary("qwen35"), model_path(model, test_models, default_model)
    daemon = spawn(binary, path, ONE_THREAD, "--chunk=8", "--parallel=2", "--kv-unified=off")
    daemon.ready()
    lanes = Lanes(daemon)
    for seq, question in enumerate(QUESTIONS):
        lanes.start(line(question), seq)
        lanes.wait_done({seq})
        assert "n_cached=0 " in lanes.done[seq], lanes.done[seq]
    stats = daemon.ok(lanes.command("stats"), "stats")
    assert stats["shared_prefixes"] == "0", stats
    assert daemon.quit() == 0
