"""generate (PROTOCOL.md 5.1): greedy and sampled decoding, stops, cancel."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest

PROMPT = "ids:2,9259,1902"  # <bos>Hello world, in the gemma vocabulary


def test_greedy_is_deterministic_and_framed(
    gemma: Any, spawn: Any, native: Any, default_model: Path
) -> None:
    tokens, reply = gemma.stream_command(f"generate {PROMPT} 12 ignore_eos=1")
    fields = gemma.ok(reply, "generate")
    assert len(tokens) == 12
    assert fields["n_prompt"] == "3"
    assert fields["n_gen"] == "12"
    assert fields["finish"] == "length"
    assert float(fields["prefill_ms"]) >= 0 and float(fields["decode_ms"]) >= 0
    assert gemma.stream_is_empty()  # exactly one -1 was written

    again, _ = gemma.stream_command(f"generate {PROMPT} 12 ignore_eos=1")
    assert again == tokens  # the sequence is cleared at each generate

    other = spawn(native.binary("qwen35"), default_model, "--threads=2")
    other.ready()
    fresh, _ = other.stream_command(f"generate {PROMPT} 12 ignore_eos=1")
    assert fresh == tokens  # another process, another thread count: same tokens


def test_greedy_continuation_is_text(gemma: Any) -> None:
    prompt, _ = gemma.stream_command("tokenize text:1,%202,%203,%204,")
    tokens, _ = gemma.stream_command(
        "generate ids:" + ",".join(map(str, prompt)) + " 8 ignore_eos=1"
    )
    text = gemma.ok(gemma.command("detokenize ids:" + ",".join(map(str, tokens))), "detokenize")[
        "text"
    ]
    assert text == "%205,%206,%207"  # " 5, 6, 7": a real model counting, not noise


def test_sampling_is_reproducible_per_seed(gemma: Any) -> None:
    options = "temp=1.0 top_k=64 top_p=0.95 min_p=0.01 rep_pen=1.1 ignore_eos=1"
    first, reply = gemma.stream_command(f"generate {PROMPT} 24 {options} seed=7")
    assert gemma.ok(reply, "generate")["n_gen"] == "24"
    same, _ = gemma.stream_command(f"generate {PROMPT} 24 {options} seed=7")
    other, _ = gemma.stream_command(f"generate {PROMPT} 24 {options} seed=8")
    assert first == same
    assert first != other


def test_default_seed_comes_from_the_flag(spawn: Any, native: Any, default_model: Path) -> None:
    runs = []
    for seed in ("5", "5", "6"):
        daemon = spawn(native.binary("qwen35"), default_model, f"--seed={seed}", "--threads=1")
        daemon.ready()
        tokens, _ = daemon.stream_command(f"generate {PROMPT} 16 temp=1.5 ignore_eos=1")
        runs.append(tokens)
        daemon.quit()
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_edge_values_of_sampling_options(gemma: Any) -> None:
    # top_p=0 keeps only the most likely token: the greedy answer.
    greedy, _ = gemma.stream_command(f"generate {PROMPT} 8 ignore_eos=1")
    top_p0, _ = gemma.stream_command(f"generate {PROMPT} 8 ignore_eos=1 temp=0.7 top_p=0")
    assert top_p0 == greedy
    # 4294967295 is the engine's "random seed" sentinel; it must still be deterministic.
    options = f"generate {PROMPT} 16 ignore_eos=1 temp=1.5 seed=4294967295"
    assert gemma.stream_command(options)[0] == gemma.stream_command(options)[0]
    # An empty stop list and explicit defaults are accepted.
    same, reply = gemma.stream_command(
        f"generate {PROMPT} 8 ignore_eos=0 stop= temp=0 top_k=0 top_p=1 min_p=0 rep_pen=1"
        " freq_pen=0 pres_pen=0 rep_window=64 seed=0"
    )
    assert gemma.ok(reply, "generate")["n_gen"] == "8" and same == greedy


def test_stop_token_is_written_and_ends_generation(gemma: Any) -> None:
    tokens, _ = gemma.stream_command(f"generate {PROMPT} 12 ignore_eos=1")
    stop = tokens[4]
    first = tokens.index(stop)
    stopped, reply = gemma.stream_command(f"generate {PROMPT} 12 ignore_eos=1 stop=999,{stop}")
    fields = gemma.ok(reply, "generate")
    assert stopped == tokens[: first + 1]
    assert fields["finish"] == "stop"
    assert fields["n_gen"] == str(first + 1)


def test_eog_stops_unless_ignored(gemma: Any) -> None:
    # The base gemma model closes a strikethrough with "</s>", which the engine treats as
    # an end-of-generation token (eog ids of this vocabulary: 1, 106, 212).
    prompt, _ = gemma.stream_command(
        "tokenize text:This%20is%20<s>wrong</s>%20right,%20and%20<s>bad"
    )
    ids = "ids:" + ",".join(map(str, prompt))
    tokens, reply = gemma.stream_command(f"generate {ids} 20")
    assert gemma.ok(reply, "generate")["finish"] == "eog"
    assert tokens == []  # the EOG token itself is not written
    tokens, reply = gemma.stream_command(f"generate {ids} 3 ignore_eos=1")
    assert gemma.ok(reply, "generate")["finish"] == "length"
    assert tokens[0] == 212 and len(tokens) == 3


def test_prompt_from_a_token_file(gemma: Any, tmp_path: Path) -> None:
    path = tmp_path / "prompt.bin"
    path.write_bytes(struct.pack("<3i", 2, 9259, 1902))
    from_file, reply = gemma.stream_command(f"generate {path} 6 ignore_eos=1")
    inline, _ = gemma.stream_command(f"generate {PROMPT} 6 ignore_eos=1")
    assert from_file == inline
    assert gemma.ok(reply, "generate")["n_prompt"] == "3"


def test_cancel_when_idle(gemma: Any) -> None:
    assert gemma.command("cancel") == "ok cancel running=0"


def test_cancel_stops_a_running_generation(spawn: Any, native: Any, default_model: Path) -> None:
    daemon = spawn(native.binary("qwen35"), default_model, "--threads=1")
    daemon.ready()
    daemon.send(f"generate {PROMPT} 3000 ignore_eos=1")
    first = daemon.read_value()  # it is running
    assert first >= 0
    time.sleep(0.2)
    daemon.send("cancel")
    rest = daemon.read_stream()
    fields = daemon.ok(daemon.readline(), "generate")
    assert fields["finish"] == "cancelled"
    assert int(fields["n_gen"]) == len(rest) + 1 < 3000
    assert daemon.readline() == "ok cancel running=1"
    assert daemon.stream_is_empty()
    # The daemon carries on normally afterwards.
    tokens, reply = daemon.stream_command(f"generate {PROMPT} 3 ignore_eos=1")
    assert len(tokens) == 3 and daemon.ok(reply, "generate")["finish"] == "length"
    assert daemon.quit() == 0


@pytest.mark.parametrize("model", ["qwen35", "qwen3"])
def test_test_models_generate_on_the_target_role(
    model: str, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    runs = []
    for _ in range(2):
        daemon = spawn(native.binary("qwen35"), test_models[model], "--n-ctx=512", "--threads=1")
        ready = daemon.ready()
        assert ready["arch"] == model and ready["vocab"] == "151936"
        prompt = daemon.stream_command("tokenize text:Hello%20world")[0]
        tokens, reply = daemon.stream_command(
            "generate ids:" + ",".join(map(str, prompt)) + " 16 ignore_eos=1"
        )
        assert daemon.ok(reply, "generate")["n_gen"] == "16"
        assert all(0 <= t < 151936 for t in tokens)
        runs.append(tokens)
        assert daemon.quit() == 0
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1  # a random model, but not a stuck one


def test_logits_left_on_the_device_are_the_ones_read_later(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # Engine patch 0212: a greedy pick from the graph's argmax (a speculative daemon takes
    # it there, engine/engine.cpp) copies no logits; what reads them later copies them
    # then. Here the kept logits of a finished generate (the same conversation again,
    # now with logprobs, picks from them) and a snapshot's: bit for bit what a daemon
    # that copies every row after every decode (LLAMA_LOGITS_ON_DEMAND=0) reads.
    prompt = [9707, 11, 1879, 374, 264, 1273, 40, 1079, 264, 3363]
    ids = "ids:" + ",".join(map(str, prompt))
    runs = {}
    for mode, env in (("on demand", {}), ("every row", {"LLAMA_LOGITS_ON_DEMAND": "0"})):
        daemon = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=512", "--threads=1",
                       "--lookup=on", "--slots=1", env=env)  # fmt: skip
        daemon.ready()
        tokens, reply = daemon.stream_command(f"generate {ids} 12 ignore_eos=1")
        assert daemon.ok(reply, "generate")["n_gen"] == "12"
        daemon.ok(daemon.command("snapshot 0"), "snapshot")
        # The sequence holds the prompt and every token but the last (never decoded).
        held = "ids:" + ",".join(map(str, prompt + tokens[:-1]))
        kept, reply = daemon.stream_command(f"generate {held} 4 ignore_eos=1 logprobs=2")
        assert daemon.ok(reply, "generate")["n_cached"] == str(len(prompt) + 11)
        assert kept[0] == tokens[-1]
        restored, reply = daemon.stream_command(f"restore 0 {held} 4 ignore_eos=1 logprobs=2")
        assert daemon.ok(reply, "restore")["n_reused"] == str(len(prompt) + 11)
        runs[mode] = (tokens, kept, restored)
        assert daemon.quit() == 0
    assert runs["on demand"] == runs["every row"]
    assert runs["on demand"][1] == runs["on demand"][2]
