"""Snapshots (PROTOCOL.md 5.5): snapshot, restore, free_snapshot, list_slots, snap=L:S,
--slots and --chunk, and the exactness promise on the default gemma3 model (sliding
window attention) and the qwen35 hybrid test model (recurrent state)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

# One engine thread: on a busy 2-core box ggml's spinning thread barriers make two
# threads tens of times slower than one, and the tokens do not depend on it.
ONE_THREAD = "--threads=1"
QWEN3_PROMPT = [9707, 1879, 11, 419, 374, 264, 1273, 315, 279, 6738]  # any ids of its vocab


def ids(tokens: list[int]) -> str:
    return "ids:" + ",".join(map(str, tokens))


@pytest.fixture(scope="module")
def qwen3(spawn_for_module: Any, native: Any, test_models: dict[str, Path]) -> Any:
    """A small daemon with --chunk=4 and 8 slots, shared by the module's quick tests."""
    daemon = spawn_for_module(
        native.binary("qwen35"),
        test_models["qwen3"],
        "--n-ctx=256",
        "--chunk=4",
        "--slots=8",
        ONE_THREAD,
    )
    daemon.ready()
    return daemon


def test_transcript_of_the_protocol(qwen3: Any) -> None:
    """The worked transcript of PROTOCOL.md section 8, on the qwen3 test model."""
    prompt = ids(QWEN3_PROMPT[:8])
    tokens, reply = qwen3.stream_command(f"generate {prompt} 3 ignore_eos=1 snap=4:0")
    fields = qwen3.ok(reply, "generate")
    assert (fields["n_gen"], fields["snap_slot"], fields["snap_pos"]) == ("3", "0", "4")
    listed = qwen3.ok(qwen3.command("list_slots"), "list_slots")
    assert listed["slots"] == "0:4" and int(listed["bytes"]) > 0

    again, reply = qwen3.stream_command(f"restore 0 {prompt} 3 ignore_eos=1")
    fields = qwen3.ok(reply, "restore")
    assert again == tokens
    assert (fields["n_prompt"], fields["n_reused"], fields["n_gen"]) == ("8", "4", "3")
    assert list(fields) == ["n_prompt", "n_reused", "n_gen", "finish", "prefill_ms", "decode_ms"]

    # The live sequence holds the prompt and every generated token but the last.
    snap = qwen3.ok(qwen3.command("snapshot 1"), "snapshot")
    assert (snap["slot"], snap["n_tokens"]) == ("1", "10")
    listed = qwen3.ok(qwen3.command("list_slots"), "list_slots")
    assert listed["slots"] == "0:4,1:10"

    freed = qwen3.ok(qwen3.command("free_snapshot 0"), "free_snapshot")
    assert freed["slot"] == "0"
    after = qwen3.ok(qwen3.command("list_slots"), "list_slots")
    assert after["slots"] == "1:10"
    assert int(after["bytes"]) == int(listed["bytes"]) - int(freed["bytes"]) == int(snap["bytes"])
    qwen3.ok(qwen3.command("free_snapshot 1"), "free_snapshot")
    assert qwen3.command("list_slots") == "ok list_slots slots= bytes=0"
    assert qwen3.stream_is_empty()  # none of these but restore touch the stream


def test_restore_continues_a_live_conversation(qwen3: Any) -> None:
    """Turn 2 restores turn 1's snapshot (prompt + answer) and prefills only the new text."""
    turn1, _ = qwen3.stream_command(f"generate {ids(QWEN3_PROMPT)} 5 ignore_eos=1")
    qwen3.ok(qwen3.command("snapshot 2"), "snapshot")
    history = QWEN3_PROMPT + turn1[:-1]
    turn2 = [*history, turn1[-1], 13, 151644]
    restored, reply = qwen3.stream_command(f"restore 2 {ids(turn2)} 6 ignore_eos=1")
    fields = qwen3.ok(reply, "restore")
    assert fields["n_reused"] == str(len(history)) and fields["n_prompt"] == str(len(turn2))
    assert len(restored) == 6
    # The restored slot is still there and gives the same answer again.
    assert qwen3.stream_command(f"restore 2 {ids(turn2)} 6 ignore_eos=1")[0] == restored


def test_restore_of_exactly_the_slot_samples_from_stored_logits(qwen3: Any) -> None:
    prompt = QWEN3_PROMPT[:8]  # a multiple of --chunk=4
    first, _ = qwen3.stream_command(f"generate {ids(prompt)} 1 ignore_eos=1")
    snap = qwen3.ok(qwen3.command("snapshot 3"), "snapshot")
    assert snap["n_tokens"] == "8"
    whole, _ = qwen3.stream_command(f"generate {ids(prompt)} 6 ignore_eos=1")
    # Meanwhile the live sequence moved on: the restore must not depend on it.
    restored, reply = qwen3.stream_command(f"restore 3 {ids(prompt)} 6 ignore_eos=1")
    fields = qwen3.ok(reply, "restore")
    assert (fields["n_reused"], fields["n_prompt"]) == ("8", "8")
    assert restored == whole and restored[0] == first[0]


def test_sampled_restore_matches_the_sampled_generate(qwen3: Any) -> None:
    options = "temp=0.9 top_k=40 top_p=0.9 rep_pen=1.2 seed=11 ignore_eos=1"
    prompt = ids(QWEN3_PROMPT)
    base, _ = qwen3.stream_command(f"generate {prompt} 12 {options} snap=8:4")
    restored, _ = qwen3.stream_command(f"restore 4 {prompt} 12 {options}")
    assert restored == base


def test_restore_with_a_snap_takes_a_longer_snapshot(qwen3: Any) -> None:
    prompt = QWEN3_PROMPT[:8]
    qwen3.stream_command(f"generate {ids(prompt)} 2 snap=4:5")
    longer = [*prompt, 100, 101, 102, 103]
    _, reply = qwen3.stream_command(f"restore 5 {ids(longer)} 2 snap=8:6")
    fields = qwen3.ok(reply, "restore")
    assert (fields["snap_slot"], fields["snap_pos"], fields["n_reused"]) == ("6", "8", "4")
    assert "5:4" in qwen3.ok(qwen3.command("list_slots"), "list_slots")["slots"]
    assert "6:8" in qwen3.ok(qwen3.command("list_slots"), "list_slots")["slots"]
    # snap=L with L == n_reused copies the restored state into another slot.
    _, reply = qwen3.stream_command(f"restore 6 {ids(longer)} 1 snap=8:7")
    assert qwen3.ok(reply, "restore")["snap_pos"] == "8"


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("snapshot 8", "bad_slot"),  # --slots=8: 0..7
        ("snapshot -1", "bad_slot"),
        ("snapshot x", "bad_slot"),
        ("snapshot 99999999999999999999", "bad_slot"),
        ("snapshot", "bad_args"),
        ("snapshot 1 2", "bad_args"),
        ("snapshot 1 extra=1", "bad_args"),
        ("free_snapshot 8", "bad_slot"),
        ("free_snapshot 7", "empty_slot"),
        ("free_snapshot", "bad_args"),
        ("list_slots 0", "bad_args"),
    ],
)
def test_slot_command_errors(qwen3: Any, command: str, code: str) -> None:
    qwen3.stream_command(f"generate {ids(QWEN3_PROMPT)} 1")  # something is decoded
    qwen3.command("free_snapshot 7")  # slot 7 empty (an err if it already was)
    reply = qwen3.command(command)
    assert qwen3.err(reply) == code, reply
    assert qwen3.stream_is_empty()


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("restore 8 ids:1 1", "bad_slot"),
        ("restore x ids:1 1", "bad_slot"),
        ("restore 7 ids:1 1", "empty_slot"),
        ("restore 0 ids:1", "bad_args"),
        ("restore 0 ids:1,2 1 colour=red", "bad_args"),
        ("restore 0 ids: 1", "empty_prompt"),
        ("restore 0 ids:1,151936 1", "bad_token"),
        ("restore 0 ids:1,2 255", "context_overflow"),
        ("restore 0 ids:9707,1879,12,419,374 1", "snapshot_mismatch"),  # diverges
        ("restore 0 ids:9707,1879,11 1", "snapshot_mismatch"),  # shorter than the slot
        ("restore 0 ids:9707,1879,11,419,374 1 snap=2:1", "bad_args"),  # inside the reused prefix
        ("restore 0 ids:9707,1879,11,419,374 1 snap=9:1", "bad_args"),  # past the prompt
        ("restore 0 ids:9707,1879,11,419,374 1 snap=5:8", "bad_slot"),
        ("generate ids:1,2 1 snap=3:1", "bad_args"),
        ("generate ids:1,2 1 snap=0:1", "bad_args"),
        ("generate ids:1,2 1 snap=2", "bad_args"),
        ("generate ids:1,2 1 snap=2:x", "bad_slot"),
        ("generate ids:1,2 1 snap=2:8", "bad_slot"),
    ],
)
def test_restore_and_snap_errors_write_one_terminator(qwen3: Any, command: str, code: str) -> None:
    qwen3.stream_command(f"generate {ids(QWEN3_PROMPT[:5])} 1 snap=4:0")  # slot 0: 4 tokens
    qwen3.command("free_snapshot 7")
    values, reply = qwen3.stream_command(command)
    assert values == [] and qwen3.err(reply) == code, reply
    assert qwen3.stream_is_empty()


def test_snapshot_of_nothing_and_a_restore_that_is_cancelled(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=4096", ONE_THREAD)
    daemon.ready()
    assert daemon.err(daemon.command("snapshot 0")) == "empty_sequence"
    assert daemon.err(daemon.command("snapshot 63")) == "empty_sequence"  # default --slots=64
    assert daemon.err(daemon.command("snapshot 64")) == "bad_slot"
    daemon.stream_command(f"generate {ids(QWEN3_PROMPT)} 1 snap=4:63")
    daemon.send(f"restore 63 {ids(QWEN3_PROMPT)} 4000 ignore_eos=1")
    assert daemon.read_value() >= 0  # running
    daemon.send("cancel")
    daemon.read_stream()
    assert daemon.ok(daemon.readline(), "restore")["finish"] == "cancelled"
    assert daemon.readline() == "ok cancel running=1"
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert (stats["requests"], stats["cancelled"], stats["slots_used"]) == ("2", "1", "1")
    assert daemon.quit() == 0


def _exactness_case(daemon: Any, prompt: list[int], snap: int, n_gen: int) -> None:
    """A restore from a chunk-aligned snapshot gives the uninterrupted run's tokens."""
    whole = ids(prompt)
    base, _ = daemon.stream_command(f"generate {whole} {n_gen} ignore_eos=1")
    with_snap, reply = daemon.stream_command(f"generate {whole} {n_gen} ignore_eos=1 snap={snap}:0")
    assert daemon.ok(reply, "generate")["snap_pos"] == str(snap)
    assert with_snap == base  # taking a snapshot changes nothing
    restored, reply = daemon.stream_command(f"restore 0 {whole} {n_gen} ignore_eos=1")
    assert daemon.ok(reply, "restore")["n_reused"] == str(snap)
    assert restored == base

    # The end of a prompt of an aligned length, continued later with more ids.
    head = ids(prompt[:snap])
    head_tokens, _ = daemon.stream_command(f"generate {head} {n_gen} ignore_eos=1")
    daemon.stream_command(f"generate {head} 1 ignore_eos=1")
    assert daemon.ok(daemon.command("snapshot 1"), "snapshot")["n_tokens"] == str(snap)
    assert daemon.stream_command(f"restore 1 {head} {n_gen} ignore_eos=1")[0] == head_tokens
    assert daemon.stream_command(f"restore 1 {whole} {n_gen} ignore_eos=1")[0] == base


@pytest.mark.parametrize("model", ["qwen35", "qwen3"])
def test_exact_restore_on_the_test_models(
    model: str, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # qwen35 is the hybrid: the snapshot carries its Gated DeltaNet recurrent state.
    daemon = spawn(
        native.binary("qwen35"), test_models[model], "--n-ctx=512", "--chunk=16", ONE_THREAD
    )
    daemon.ready()
    rng = random.Random(5)
    prompt = [rng.randrange(100, 150000) for _ in range(77)]
    _exactness_case(daemon, prompt, snap=48, n_gen=12)
    assert daemon.quit() == 0


def test_exact_restore_on_the_default_model(spawn: Any, native: Any, default_model: Path) -> None:
    daemon = spawn(native.binary("qwen35"), default_model, "--n-ctx=1024", "--chunk=32", ONE_THREAD)
    daemon.ready()
    prompt, _ = daemon.stream_command(
        "tokenize text:" + "The%20quick%20brown%20fox%20jumps%20over%20the%20lazy%20dog.%20" * 8
    )
    assert len(prompt) > 64
    _exactness_case(daemon, prompt, snap=64, n_gen=8)
    assert daemon.quit() == 0


def test_exact_restore_past_the_sliding_window(
    spawn: Any, native: Any, default_model: Path
) -> None:
    """gemma3's local layers see 512 positions. A snapshot at 600 leaves out the cells
    that slid out of that window, so restored cells sit at other indices than in the run
    it came from; the prefill's re-layout at aligned positions keeps the runs identical.
    Without it this very case (seed 9) restores to other tokens: one seed in ten does."""
    daemon = spawn(
        native.binary("qwen35"), default_model, "--n-ctx=1024", "--chunk=100", ONE_THREAD
    )
    daemon.ready()
    rng = random.Random(9)
    whole = ids([2] + [rng.randrange(100, 20100) for _ in range(699)])
    base, reply = daemon.stream_command(f"generate {whole} 24 ignore_eos=1 snap=600:0")
    assert daemon.ok(reply, "generate")["snap_pos"] == "600"
    restored, reply = daemon.stream_command(f"restore 0 {whole} 24 ignore_eos=1")
    assert daemon.ok(reply, "restore")["n_reused"] == "600"
    assert restored == base
    assert daemon.quit() == 0
