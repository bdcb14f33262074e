"""park / unpark (PROTOCOL.md 5.6): weights and context go, the tokenizer and the
snapshots stay, and generation after unpark is what it was before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.native.test_prefix_reuse import wait_for

ONE_THREAD = "--threads=1"  # see test_snapshots.py
PROMPT = "ids:2,9259,1902,563,1144,236764,1017,1144"  # gemma ids


def test_park_frees_the_weights_and_unpark_restores_generation(
    spawn: Any, native: Any, default_model: Path, tmp_path: Path
) -> None:
    daemon = spawn(native.binary("qwen35"), default_model, "--n-ctx=512", "--chunk=4", ONE_THREAD)
    daemon.ready()
    before, _ = daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1 snap=4:0")
    sampled, _ = daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1 temp=0.8 seed=5")
    restored_before, _ = daemon.stream_command(f"restore 0 {PROMPT} 8 ignore_eos=1")
    assert restored_before == before
    daemon.command(f"vocab {tmp_path / 'before.msgpack'}")
    loaded = daemon.ok(daemon.command("stats"), "stats")
    assert loaded["parked"] == "0"

    parked = daemon.ok(daemon.command("park"), "park")
    assert (parked["target"], parked["draft"]) == ("parked", "absent")
    # The mapped file is gone from the resident set: at least half of the 253 MB model.
    model_kb = default_model.stat().st_size // 1024
    drop_kb = int(loaded["rss_kb"]) - int(parked["rss_kb"])
    assert drop_kb > model_kb // 2, (loaded["rss_kb"], parked["rss_kb"], model_kb)

    # What needs the weights says so, with the stream's -1 where it is a stream command.
    for command in (f"generate {PROMPT} 4", f"restore 0 {PROMPT} 4"):
        values, reply = daemon.stream_command(command)
        assert values == [] and daemon.err(reply) == "parked", reply
    assert daemon.err(daemon.command("snapshot 1")) == "parked"
    # The tokenizer, the slots and stats stay.
    tokens, reply = daemon.stream_command("tokenize text:still%20works")
    assert tokens == [2, 40016, 4146] and daemon.ok(reply, "tokenize")["n"] == "3"
    assert daemon.command("detokenize ids:9259,1902") == "ok detokenize text=Hello%20world"
    daemon.ok(daemon.command(f"vocab {tmp_path / 'parked.msgpack'}"), "vocab")
    assert (tmp_path / "parked.msgpack").read_bytes() == (tmp_path / "before.msgpack").read_bytes()
    assert daemon.ok(daemon.command("list_slots"), "list_slots")["slots"] == "0:4"
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert (stats["parked"], stats["slots_used"]) == ("1", "1")
    assert stats["model_bytes"] == loaded["model_bytes"]
    # Idempotent, and the draft (absent) parks as a no-op.
    assert daemon.ok(daemon.command("park"), "park")["target"] == "parked"
    assert daemon.ok(daemon.command("park draft"), "park")["draft"] == "absent"

    unparked = daemon.ok(daemon.command("unpark"), "unpark")
    assert (unparked["target"], unparked["draft"]) == ("ready", "absent")
    assert daemon.ok(daemon.command("unpark target"), "unpark")["target"] == "ready"
    after, _ = daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1")
    assert after == before
    assert daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1 temp=0.8 seed=5")[0] == sampled
    # A snapshot taken before the park restores into the new context.
    assert daemon.stream_command(f"restore 0 {PROMPT} 8 ignore_eos=1")[0] == before
    assert daemon.ok(daemon.command("stats"), "stats")["parked"] == "0"
    assert daemon.quit() == 0


def test_park_target_only_and_unpark_draft_only(
    spawn: Any, native: Any, test_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint blocks made at startup, on plain memory too (engine/prefix_reuse.h).
    monkeypatch.setenv("LUCERNA_STATE_RESERVE", "1")
    daemon = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=256", ONE_THREAD)
    daemon.ready()

    def kept_bytes() -> int:
        return int(daemon.ok(daemon.command("stats"), "stats")["state_kept_bytes"])

    reserved = kept_bytes()  # the checkpoint block made at startup (engine/prefix_reuse.h)
    assert reserved > 0
    before, _ = daemon.stream_command("generate ids:9707,1879,11 6 ignore_eos=1")
    draft = daemon.ok(daemon.command("park draft"), "park")
    assert (draft["target"], draft["draft"]) == ("ready", "absent")
    assert daemon.ok(daemon.command("park target"), "park")["target"] == "parked"
    assert kept_bytes() == 0  # parked: no host memory kept for states
    assert daemon.ok(daemon.command("unpark draft"), "unpark")["target"] == "parked"
    assert daemon.ok(daemon.command("unpark all"), "unpark")["target"] == "ready"
    assert kept_bytes() == reserved
    assert daemon.stream_command("generate ids:9707,1879,11 6 ignore_eos=1")[0] == before
    assert daemon.quit() == 0


def test_park_arguments(spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=256", ONE_THREAD)
    daemon.ready()
    for command in ("park now", "park target draft", "unpark x=1", "unpark everything"):
        assert daemon.err(daemon.command(command)) == "bad_args", command
    assert daemon.ok(daemon.command("stats"), "stats")["parked"] == "0"
    assert daemon.quit() == 0


def test_a_failed_unpark_stays_parked(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path
) -> None:
    model = tmp_path / "qwen3.gguf"
    model.write_bytes(test_models["qwen3"].read_bytes())
    daemon = spawn(native.binary("qwen35"), model, "--n-ctx=256", ONE_THREAD)
    daemon.ready()
    before, _ = daemon.stream_command("generate ids:9707,1879,11 6 ignore_eos=1")
    daemon.ok(daemon.command("park"), "park")
    model.rename(tmp_path / "moved.gguf")
    assert daemon.err(daemon.command("unpark")) == "load_failed"
    assert daemon.ok(daemon.command("stats"), "stats")["parked"] == "1"
    values, reply = daemon.stream_command("generate ids:9707 1")
    assert values == [] and daemon.err(reply) == "parked"
    (tmp_path / "moved.gguf").rename(model)
    assert daemon.ok(daemon.command("unpark"), "unpark")["target"] == "ready"
    assert daemon.stream_command("generate ids:9707,1879,11 6 ignore_eos=1")[0] == before
    assert daemon.quit() == 0


def test_a_daemon_started_parked_loads_the_vocabulary_alone(
    spawn: Any, native: Any, default_model: Path, tmp_path: Path
) -> None:
    """``--parked=on`` (a tokenizer daemon's start): the ready line says so, the weights are
    never read, the tokenizer answers as a loaded daemon's does, and the first unpark
    gives the daemon that a plain start gives, down to its state's identity."""
    flags = ("--n-ctx=512", "--chunk=4", ONE_THREAD)
    loaded = spawn(native.binary("qwen35"), default_model, *flags)
    loaded_ready = loaded.ready()
    before, _ = loaded.stream_command(f"generate {PROMPT} 8 ignore_eos=1 snap=4:0")
    loaded.ok(loaded.command(f"vocab {tmp_path / 'loaded.msgpack'}"), "vocab")
    loaded_stats = loaded.ok(loaded.command("stats"), "stats")

    daemon = spawn(native.binary("qwen35"), default_model, *flags, "--parked=on")
    ready = daemon.ready()
    assert ready["parked"] == "1" and "parked" not in loaded_ready
    # No context yet: n_ctx is the one asked for, and the state has no identity until the
    # engine has made the context (its n_ctx is part of it).
    assert ready["n_ctx"] == "512" and "state_id" not in ready
    assert {k: v for k, v in ready.items() if k not in ("parked", "n_ctx")} == {
        k: v for k, v in loaded_ready.items() if k not in ("n_ctx", "state_id")}
    stats = daemon.ok(daemon.command("stats"), "stats")
    # What the weights weigh (the file's tensor table), as when a loaded daemon parks.
    assert (stats["parked"], stats["model_bytes"]) == ("1", loaded_stats["model_bytes"])
    model_kb = default_model.stat().st_size // 1024
    assert int(stats["rss_kb"]) < int(loaded_stats["rss_kb"]) - model_kb // 2, (stats, loaded_stats)

    tokens, reply = daemon.stream_command("tokenize text:still%20works")
    assert tokens == [2, 40016, 4146] and daemon.ok(reply, "tokenize")["n"] == "3"
    daemon.ok(daemon.command(f"vocab {tmp_path / 'parked.msgpack'}"), "vocab")
    assert (tmp_path / "parked.msgpack").read_bytes() == (tmp_path / "loaded.msgpack").read_bytes()
    values, reply = daemon.stream_command(f"generate {PROMPT} 4")
    assert values == [] and daemon.err(reply) == "parked", reply
    # Snapshot files carry the state's identity, not known yet.
    snapshot_file = tmp_path / "loaded.lsnap"
    loaded.ok(loaded.command(f"save_slot 0 {snapshot_file}"), "save_slot")
    for command in (f"load_slot 0 {snapshot_file}", f"save_slot 0 {tmp_path / 'x.lsnap'}"):
        reply = daemon.command(command)
        assert daemon.err(reply) == "parked" and "started parked" in reply, reply

    assert daemon.ok(daemon.command("unpark"), "unpark")["target"] == "ready"
    assert daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1")[0] == before
    unparked = daemon.ok(daemon.command("stats"), "stats")
    for key in ("parked", "n_ctx"):
        assert unparked[key] == loaded_stats[key], key
    # The identity it computed is a plain start's: the file the loaded daemon wrote loads.
    wait_for(snapshot_file)  # save_slot writes behind its reply (5.10)
    loaded_slot = daemon.ok(daemon.command(f"load_slot 3 {snapshot_file}"), "load_slot")
    assert loaded_slot["n_tokens"] == "4"
    assert daemon.stream_command(f"restore 3 {PROMPT} 8 ignore_eos=1")[0] == before
    assert daemon.quit() == 0 and loaded.quit() == 0


def test_parked_flag_values_and_roles(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    for binary, model, flag in (
        (native.binary("qwen35"), test_models["qwen3"], "--parked=yes"),
        (native.binary("ds4_shard"), test_models["deepseek4"], "--parked=on"),  # holds weights only
    ):
        daemon = spawn(binary, model, flag, stream=False)
        line = daemon.readline()
        assert daemon.err(line) == "bad_flag", (flag, line)
        assert daemon.wait() == 2
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--parked=off", ONE_THREAD)
    assert "parked" not in daemon.ready()
    assert daemon.quit() == 0
