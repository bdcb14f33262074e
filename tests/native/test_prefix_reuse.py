"""Prefix reuse and snapshot files (PROTOCOL.md 5.10) on real daemons.

Equality with a generation from an empty sequence is checked in the deterministic mode
(``EXACT``: ``--deterministic=on``, with the F32 KV cache and flash attention off these
tests used before it), the setting PROTOCOL.md 5.10 names: there every kernel computes
a position the same way in a batch of one (decode) and in a prefill chunk, so reuse
cannot flip a near-tie. Each model is one kind of memory the
daemon must cut back exactly: qwen3 (attention only: cut anywhere), qwen35 (Gated
DeltaNet recurrent state: checkpoints), laguna (mixture of experts with a sliding
window: checkpoints of the window cache).
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.native import sources

EXACT = ("--kv-type=f32", "--flash-attn=off", "--deterministic=on")
ONE_THREAD = "--threads=1"
ROLE = {"qwen3": "qwen35", "qwen35": "qwen35", "laguna": "laguna"}


def ids(tokens: list[int]) -> str:
    return "ids:" + ",".join(map(str, tokens))


def generate(daemon: Any, prompt: list[int], n: int,
             *options: str) -> tuple[list[int], dict[str, str]]:
    line = f"generate {ids(prompt)} {n} ignore_eos=1 {' '.join(options)}"
    tokens, reply = daemon.stream_command(line)
    return tokens, daemon.ok(reply, "generate")


@pytest.fixture(scope="module", params=sorted(ROLE))
def target(request: Any, spawn_for_module: Any, native: Any, test_models: dict[str, Path]) -> Any:
    daemon = spawn_for_module(native.binary(ROLE[request.param]), test_models[request.param],
                              "--n-ctx=1024", "--chunk=32", ONE_THREAD, *EXACT)
    daemon.ready_fields = daemon.ready()
    daemon.model = request.param
    return daemon


def wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.02)


def conversation(seed: int, n: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(100, 5000) for _ in range(n)]


def test_each_turn_of_a_conversation_reuses_what_the_last_left(target: Any) -> None:
    """A growing conversation, as an agent sends it: every turn is the previous prompt,
    its reply and new words. The daemon held the previous prompt and all of the reply
    but its last token (sampled, never decoded): all of that is reused, and each turn's
    tokens equal a generation from an empty sequence."""
    prompt = conversation(1, 70)
    turns = []
    for turn in range(4):
        tokens, fields = generate(target, prompt, 12, f"marks={len(prompt) - 9}")
        if turn > 0:
            assert fields["n_cached"] == str(len(prompt) - 15 - 1), (target.model, fields)
        turns.append((prompt, tokens))
        prompt = prompt + tokens + conversation(10 + turn, 15)
    for turn, (prompt, tokens) in enumerate(turns):
        cold, fields = generate(target, prompt, 12, "reuse=0", f"marks={len(prompt) - 9}")
        assert fields["n_cached"] == "0"
        assert cold == tokens, (target.model, turn)


def test_a_diverging_prompt_goes_back_to_a_mark_or_cuts(target: Any) -> None:
    """A prompt sharing only part of the live sequence: an attention-only model cuts
    back to exactly what is shared; the others go back to the newest checkpoint inside it
    (here the mark the earlier prefill kept)."""
    base = conversation(2, 80)
    generate(target, base, 4, "marks=40,64")
    diverging = base[:70] + conversation(3, 10)
    tokens, fields = generate(target, diverging, 8)
    expected, _ = generate(target, diverging, 8, "reuse=0")
    assert tokens == expected
    want = 70 if target.model == "qwen3" else 64
    assert fields["n_cached"] == str(want), (target.model, fields)


def test_the_same_prompt_again_starts_from_its_checkpointed_logits(target: Any) -> None:
    prompt = conversation(4, 50)
    first, _ = generate(target, prompt, 6)
    again, fields = generate(target, prompt, 6)
    assert again == first
    # qwen3 cuts to all but the last token; the others kept the prompt's end with its
    # logits and prefill nothing.
    assert fields["n_cached"] == str(49 if target.model == "qwen3" else 50), fields


def test_a_slot_whose_tokens_start_the_prompt_is_reused(target: Any) -> None:
    shared = conversation(5, 48)
    generate(target, shared + conversation(6, 10), 4, "snap=48:3")
    generate(target, conversation(7, 30), 2)  # another conversation replaces the live one
    prompt = shared + conversation(8, 12)
    tokens, fields = generate(target, prompt, 6)
    expected, _ = generate(target, prompt, 6, "reuse=0")
    assert tokens == expected
    assert (fields["n_cached"], fields["cache_slot"]) == ("48", "3")
    target.command("free_snapshot 3")


def test_a_slot_that_goes_past_the_prompt_is_cut_back_where_the_model_allows(target: Any) -> None:
    """A repeated request: the slot holds an earlier conversation (its prompt and
    reply), the prompt is that conversation's prompt again, or part of it. An
    attention-only model takes the slot and cuts it back to all but the prompt's last
    token; a model with an uncuttable part (recurrent state, window cache) cannot cut a
    slot, and prefills."""
    prompt = conversation(11, 60)
    first, _ = generate(target, prompt, 8)
    target.command("snapshot 4")  # the prompt and 7 of its 8 tokens (the last is undecoded)
    generate(target, conversation(12, 30), 2)  # another conversation replaces the live one
    for again in (prompt, prompt[:40] + conversation(13, 10)):
        tokens, fields = generate(target, again, 8)
        expected, _ = generate(target, again, 8, "reuse=0")
        assert tokens == expected
        if again is prompt:
            assert tokens == first
        cut = min(len(again) - 1, 60 if again is prompt else 40)
        want = (str(cut), "4") if target.model == "qwen3" else ("0", None)
        assert (fields["n_cached"], fields.get("cache_slot")) == want, (target.model, fields)
        generate(target, conversation(12, 30), 2)
    target.command("free_snapshot 4")


def test_a_snap_caps_the_reuse_so_the_snapshot_is_taken(target: Any) -> None:
    prompt = conversation(9, 64)
    generate(target, prompt, 2)
    _, fields = generate(target, [*prompt, 7, 8], 2, "snap=32:4", "marks=32")
    assert (fields["snap_slot"], fields["snap_pos"]) == ("4", "32")
    # Fewer than L tokens (PROTOCOL.md 5.1, snap): qwen3 cuts the live sequence to 31 and
    # decodes position 31, so the snapshot has logits; the others hold no checkpoint
    # below 32 (the first request set no marks) and prefill from 0.
    assert fields["n_cached"] == ("31" if target.model == "qwen3" else "0"), fields
    assert "4:32" in target.ok(target.command("list_slots"), "list_slots")["slots"]
    target.command("free_snapshot 4")


def test_marks_are_checked(target: Any) -> None:
    for marks in ("marks=0", "marks=5,5", "marks=9,3", "marks=99", "marks=x"):
        _, reply = target.stream_command(f"generate {ids(conversation(1, 8))} 1 {marks}")
        assert target.err(reply) == "bad_args", (marks, reply)
    generate(target, [1, 2], 1, "snap=2:0")
    _, reply = target.stream_command(f"restore 0 {ids([1, 2])} 1 reuse=1")  # generate's only
    assert target.err(reply) == "bad_args"
    target.command("free_snapshot 0")


def test_snapshot_files_round_trip_and_refuse_what_is_not_theirs(
        target: Any, spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path) -> None:
    prompt = conversation(11, 40)
    expected, _ = generate(target, [*prompt, 9, 9], 5, "reuse=0", "snap=40:6")
    path = tmp_path / "conv.lsnap"
    saved = target.ok(target.command(f"save_slot 6 {path}"), "save_slot")
    # Written in the background: the slot can go at once, the file is whole once it is there.
    target.command("free_snapshot 6")
    wait_for(path)
    assert int(saved["bytes"]) == path.stat().st_size > 0
    assert not list(tmp_path.glob("*.tmp-*"))
    loaded = target.ok(target.command(f"load_slot 7 {path}"), "load_slot")
    assert (loaded["slot"], loaded["n_tokens"]) == ("7", "40")
    generate(target, conversation(12, 20), 1)  # the live sequence is something else
    tokens, fields = generate(target, [*prompt, 9, 9], 5)
    assert tokens == expected and (fields["n_cached"], fields["cache_slot"]) == ("40", "7")

    data = path.read_bytes()
    corrupt = tmp_path / "corrupt.lsnap"
    corrupt.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    truncated = tmp_path / "truncated.lsnap"
    truncated.write_bytes(data[: len(data) // 2])
    for bad in (corrupt, truncated, tmp_path / "missing.lsnap", test_models["qwen3"]):
        reply = target.command(f"load_slot 7 {bad}")
        assert target.err(reply) == "bad_snapshot_file", (bad, reply)
    # The failed loads left slot 7 as it was.
    assert "7:40" in target.ok(target.command("list_slots"), "list_slots")["slots"]
    assert target.err(target.command(f"save_slot 2 {tmp_path}/empty.lsnap")) == "empty_slot"
    # A write that fails (no such directory) is logged and leaves no file; the daemon goes on.
    target.ok(target.command(f"save_slot 7 {tmp_path}/missing/dir.lsnap"), "save_slot")
    generate(target, [3, 4, 5], 1)
    assert not (tmp_path / "missing").exists()

    # Another setting (here n_ctx) is another state identity: the file is refused.
    other = spawn(native.binary(ROLE[target.model]), test_models[target.model],
                  "--n-ctx=512", "--chunk=32", ONE_THREAD, *EXACT)
    assert other.ready()["state_id"] != target.ready_fields["state_id"]
    reply = other.command(f"load_slot 0 {path}")
    assert other.err(reply) == "bad_snapshot_file" and "another model" in reply
    target.command("free_snapshot 7")


def test_a_parked_daemon_saves_and_loads_files(target: Any, tmp_path: Path) -> None:
    generate(target, conversation(13, 20), 2, "snap=20:1")
    target.ok(target.command("park"), "park")
    try:
        target.ok(target.command(f"save_slot 1 {tmp_path / 'p.lsnap'}"), "save_slot")
        wait_for(tmp_path / "p.lsnap")
        target.ok(target.command(f"load_slot 2 {tmp_path / 'p.lsnap'}"), "load_slot")
    finally:
        target.ok(target.command("unpark"), "unpark")
    tokens, fields = generate(target, [*conversation(13, 20), 5], 3)
    expected, _ = generate(target, [*conversation(13, 20), 5], 3, "reuse=0")
    assert tokens == expected and fields["n_cached"] == "20"
    for slot in (1, 2):
        target.command(f"free_snapshot {slot}")


@pytest.mark.slow
def test_speculative_decoding_reuses_the_prefix_losslessly(
        spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    """With a DFlash draft the draft's cache is cut with the target's: turns reuse the
    prefix and still give the autoregressive tokens."""
    plain = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024", "--chunk=32",
                  ONE_THREAD, *EXACT)
    drafted = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024", "--chunk=32",
                    ONE_THREAD, *EXACT, f"--draft={test_models['dflash']}")
    plain.ready()
    drafted.ready()
    prompt = conversation(14, 60)
    for turn in range(3):
        expected, _ = generate(plain, prompt, 16, "reuse=0")
        tokens, fields = generate(drafted, prompt, 16, "marks=40")
        assert tokens == expected
        assert int(fields["draft_steps"]) > 0
        # Each later turn reuses the previous prompt and all of its reply but the last
        # token (never decoded): all but the 8 new words and that token.
        assert fields["n_cached"] == ("0" if turn == 0 else str(len(prompt) - 8 - 1)), fields
        prompt = prompt + tokens + conversation(15, 8)


def test_a_cut_never_leaves_a_sequence_without_logits(
        spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    """Regression: a generate restored a slot equal to its prompt, the next one cut the
    sequence back to a snap position, and the snapshot read logits no decode had made
    (SIGSEGV). A cut now always prefills at least one token before a snap, and a cut
    sequence without logits is never sampled from or snapshotted."""
    d = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", "--slots=8",
              ONE_THREAD)
    d.ready()
    for line in ("generate ids:9707,1879,11 1", "snapshot 4", "park", "unpark",
                 "generate ids:9707,1879,11 1", "generate ids:9707,1879,11 2 snap=2:1"):
        reply = d.command(line) if not line.startswith("generate") else d.stream_command(line)[1]
        assert reply.startswith("ok "), (line, reply)
    assert "1:2" in d.ok(d.command("list_slots"), "list_slots")["slots"]
    # A generate cancelled before its prefill (queued behind a long one when the cancel
    # came) leaves the sequence cut back, with no logits: it cannot be snapshotted, and
    # the same prompt again prefills its last token instead of sampling from nothing.
    d.send("generate ids:5,6,7,8,9 48 ignore_eos=1")
    d.read_value()  # it runs: the next two arrive while it decodes
    d.send("generate ids:5,6,7 3")
    d.send("cancel")
    d.read_stream()
    assert "finish=cancelled" in d.readline()
    assert d.read_stream() == []
    # It had cut the sequence back to [5, 6] (its last token is always prefilled).
    assert "n_cached=2 n_gen=0 finish=cancelled" in d.readline()
    assert d.ok(d.readline(), "cancel")["running"] == "1"
    assert d.err(d.command("snapshot 0")) == "empty_sequence"
    tokens, reply = d.stream_command("generate ids:5,6 2")
    fields = d.ok(reply, "generate")
    assert (fields["n_gen"], fields["n_cached"], len(tokens)) == ("2", "1", 2)
    assert d.quit() == 0


def test_a_new_conversation_keeps_its_checkpoint_in_memory_the_last_one_freed(
        spawn: Any, native: Any, test_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """engine/state_memory.h: a state's host memory, freed, is kept for the next state of
    its size (a model's checkpoints all have one), so a request's checkpoint needs no
    fresh pages; on the CPU it is plain memory, page-locked only for a GPU. The first
    conversation's checkpoint takes a block made at startup (reserve_checkpoint_memory,
    engine/prefix_reuse.h): one per sequence, there before any request. They are made
    where states are page-locked (a GPU); ``LUCERNA_STATE_RESERVE=1`` makes them here."""
    monkeypatch.setenv("LUCERNA_STATE_RESERVE", "1")
    d = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024", "--chunk=32",
              "--parallel=2", ONE_THREAD)
    d.ready()
    before = d.ok(d.command("stats"), "stats")
    assert before["states_reused"] == "0", before
    block = int(before["state_kept_bytes"]) // 2
    assert block > 0 and int(before["state_kept_bytes"]) == 2 * block, before
    generate(d, conversation(40, 70), 4)  # a checkpoint at its prompt's end: a reserved block
    first = d.ok(d.command("stats"), "stats")
    assert first["states_reused"] == "1" and int(first["state_kept_bytes"]) == block, first
    generate(d, conversation(41, 70), 4)  # that one goes; this prompt's takes its block
    after = d.ok(d.command("stats"), "stats")
    assert after["states_reused"] == "2", after
    assert int(after["state_kept_bytes"]) == block, after  # the other sequence's, still there
    assert after["states_page_locked"] == "0", after


@pytest.mark.parametrize("setting", ["0", None])
def test_without_the_reservation_a_first_checkpoint_takes_new_memory(
        spawn: Any, native: Any, test_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch, setting: str | None) -> None:
    """``LUCERNA_STATE_RESERVE=0`` (the switch that measures it) makes no block ahead, and
    unset, a CPU daemon (plain memory, where a block made ahead saves nothing) makes none."""
    if setting is None:
        monkeypatch.delenv("LUCERNA_STATE_RESERVE", raising=False)
    else:
        monkeypatch.setenv("LUCERNA_STATE_RESERVE", setting)
    d = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024", "--chunk=32",
              ONE_THREAD)
    d.ready()
    generate(d, conversation(40, 70), 4)
    stats = d.ok(d.command("stats"), "stats")
    assert (stats["states_reused"], stats["state_kept_bytes"]) == ("0", "0"), stats


def test_a_shorter_conversations_snapshot_takes_the_block_a_longer_one_freed(
        spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    """engine/state_memory.h: snapshots differ in size with their conversations' length
    (the KV cells), so a kept block serves a state down to half its size."""
    d = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024", "--chunk=32",
              ONE_THREAD)
    d.ready()
    generate(d, conversation(42, 150), 4)
    longer = d.ok(d.command("snapshot 0"), "snapshot")
    d.ok(d.command("free_snapshot 0"), "free_snapshot")
    before = d.ok(d.command("stats"), "stats")
    generate(d, conversation(43, 60), 4)  # its checkpoint takes the last one's block
    shorter = d.ok(d.command("snapshot 1"), "snapshot")
    after = d.ok(d.command("stats"), "stats")
    # Sizes apart by more than the allocator's rounding: an exact-size match alone could
    # not serve the shorter snapshot.
    granule = [int(v) << int(s) for v, s in re.findall(
        r"constexpr size_t kGranule = size_t\((\d+)\) << (\d+);",
        sources.native_source("engine/state_memory.cpp"))]
    assert len(granule) == 1
    assert int(longer["bytes"]) - int(shorter["bytes"]) > granule[0], (shorter, longer)
    assert int(after["states_reused"]) == int(before["states_reused"]) + 2, after
    assert int(after["state_kept_bytes"]) == 0, after
    assert d.quit() == 0


def test_an_idle_daemon_makes_memory_ready_for_the_next_snapshot(
        spawn: Any, native: Any, test_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """engine/state_memory.h: a snapshot the front end's cache keeps never gives its
    block back, so each new conversation's snapshot took new memory on its request's
    way (on a GPU, a page-locked block locked then). A state that took a new block
    leaves the daemon, after a pause in its commands, a spare a quarter larger, which
    the next one takes. Made where states are page-locked (a GPU);
    ``LUCERNA_STATE_RESERVE=1`` makes it here, and ``0`` (the switch that measures it),
    nowhere."""
    quiet_ms = [int(ms) for ms in re.findall(
        r"constexpr std::chrono::milliseconds kQuietBeforeSpare\{(\d+)\};",
        sources.native_source("daemon/daemon.cpp"))]
    assert len(quiet_ms) == 1

    def kept_after_idling(d: Any) -> tuple[int, dict[str, str]]:
        # The daemon makes a spare only after that long with no command.
        time.sleep(4 * quiet_ms[0] / 1000)
        stats = d.ok(d.command("stats"), "stats")
        return int(stats["state_kept_bytes"]), stats

    for setting in ("1", "0"):
        monkeypatch.setenv("LUCERNA_STATE_RESERVE", setting)
        d = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=1024",
                  "--chunk=32", ONE_THREAD)
        d.ready()
        generate(d, conversation(44, 120), 4)  # its checkpoint: the block made at startup
        kept_before, before = kept_after_idling(d)
        # Nothing kept holds the snapshot: new memory. The stats comes right behind it, as
        # a request's generate does behind its snapshot: no pause, no spare between them.
        d.send("snapshot 0\nstats")
        first = d.ok(d.readline(), "snapshot")
        assert d.ok(d.readline(), "stats")["state_kept_bytes"] == "0"
        kept, _ = kept_after_idling(d)
        if setting == "0":
            assert kept == kept_before == 0
            assert d.quit() == 0
            continue
        assert kept_before == 0, before
        # The spare holds the engine's state a quarter over; the snapshot's bytes count
        # its logits too (one vocabulary of floats), which are not state memory.
        assert 0 < kept < int(first["bytes"]), (first, kept)
        generate(d, conversation(45, 140), 4)  # the last checkpoint's block, freed, serves
        second = d.ok(d.command("snapshot 1"), "snapshot")  # the spare serves
        kept_after, after = kept_after_idling(d)
        assert int(second["bytes"]) > int(first["bytes"]), (first, second)
        assert int(after["states_reused"]) == int(before["states_reused"]) + 2, (before, after)
        assert kept_after == 0, after  # no state took new memory: no spare to make
        assert after["states_page_locked"] == "0", after
        assert d.quit() == 0


def three_conversations_then_repeats(spawn: Any, native: Any, path: Path, *flags: str
                                     ) -> tuple[list[dict[str, str]], list[str]]:
    """Three conversations on a ``--parallel=3`` daemon, one after the other on lanes 0,
    1 and 2, each with a mark (a checkpoint there and at its prompt's end); then the
    first and the last prompt again on their own lanes. The stats after each of the
    three, and the repeats' done lines."""
    from tests.native.test_batching import ONE_THREAD, Lanes, ids

    daemon = spawn(native.binary("qwen35"), path, ONE_THREAD, "--chunk=8", "--parallel=3", *flags)
    daemon.ready()
    lanes = Lanes(daemon)
    prompts = [[seq * 1000 + 100 + i for i in range(20)] for seq in range(3)]
    stats = []
    for seq, prompt in enumerate(prompts):
        lanes.start(f"generate {ids(prompt)} 4 ignore_eos=1 marks=8", seq)
        lanes.wait_done({seq})
        stats.append(daemon.ok(lanes.command("stats"), "stats"))
    repeats = []
    for seq in (0, 2):
        del lanes.done[seq]
        lanes.start(f"generate {ids(prompts[seq])} 4 ignore_eos=1", seq)
        lanes.wait_done({seq})
        repeats.append(lanes.done[seq])
    assert daemon.quit() == 0
    return stats, repeats


def test_checkpoint_mib_keeps_every_sequences_checkpoints_within_it(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    """Without a bound each of the three conversations keeps its two checkpoints and
    both repeats start from their prompt's end. With ``--checkpoint-mib`` the
    checkpoints stay within it, the least recently used conversation's go first, and the
    last conversation's repeat still starts from its checkpoint, the first's from 0."""
    path = test_models["qwen35"]
    unbounded, repeats = three_conversations_then_repeats(spawn, native, path)
    one = int(unbounded[0]["checkpoint_bytes"]) // 2
    held = [int(s["checkpoint_bytes"]) for s in unbounded]
    assert one > 0 and held == [2 * one, 4 * one, 6 * one]
    assert all(s["checkpoints_dropped"] == "0" for s in unbounded)
    assert all("n_cached=20 " in done for done in repeats), repeats
    # Room for three or four checkpoints of this size, so the first conversation's two go.
    mib = (3 * one) // (1 << 20) + 1
    assert 3 * one < mib << 20 < 5 * one, (one, mib)
    bounded, repeats = three_conversations_then_repeats(spawn, native, path,
                                                        f"--checkpoint-mib={mib}")
    assert all(int(s["checkpoint_bytes"]) <= mib << 20 for s in bounded), bounded
    assert int(bounded[-1]["checkpoints_dropped"]) >= 2, bounded[-1]
    assert "n_cached=0 " in repeats[0], repeats[0]
    assert "n_cached=20 " in repeats[1], repeats[1]
