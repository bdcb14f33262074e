"""Startup: the ready line, flags, the clean stdout channel, quit/exit/EOF (PROTOCOL.md 1-2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemons.native import NativeBuild
from tests.daemons.test_stats import KEYS
from tests.native.test_roles import CAPS

GEMMA_READY = {
    "protocol": "1",
    "role": "qwen35",
    "arch": "gemma3",
    "vocab": "262144",
    "n_ctx": "4096",
    "n_ctx_train": "32768",
    "bos": "2",
    "eos": "1",
    "add_bos": "1",
    "backend": "cpu",
    "engine": "",  # the build's: the pin plus our patch series' hash (daemons/engine.py)
    "version": "0.1.0",
    "capabilities": CAPS["qwen35"],
}


def test_ready_line_of_the_default_model(
    spawn: Any, native: NativeBuild, default_model: Path
) -> None:
    daemon = spawn(native.binary("qwen35"), default_model)
    first = daemon.readline()
    assert first.startswith("ready ")
    fields = dict(word.split("=", 1) for word in first.split(" ")[1:])
    # state_id names the model file as it is on this disk (PROTOCOL.md 2): its form only.
    state_id = fields.pop("state_id")
    assert len(state_id) == 16 and int(state_id, 16) >= 0
    expected = {**GEMMA_READY, "engine": native.engine.name}
    assert fields == expected
    assert first == "ready " + " ".join(
        f"{k}={v}" for k, v in {**expected, "state_id": state_id}.items())
    assert daemon.quit() == 0


def test_stdout_carries_only_protocol_lines(
    spawn: Any, native: NativeBuild, default_model: Path
) -> None:
    # LUCERNA_LOG=info turns on the whole engine log: all of it must land on stderr.
    daemon = spawn(
        native.binary("qwen35"), default_model, "--threads=1", env={"LUCERNA_LOG": "info"}
    )
    daemon.ready()
    daemon.stream_command("generate ids:2,9259,1902 4")
    daemon.stream_command("tokenize text:Hello")
    daemon.command("stats")
    daemon.command("frobnicate")
    assert daemon.quit() == 0
    assert daemon.proc.stdout is not None
    assert daemon.proc.stdout.read() == b""  # nothing after "ok quit"
    assert all(line.split(" ", 1)[0] in ("ready", "ok", "err") for line in daemon.stdout_lines)
    assert len(daemon.stdout_lines) == 6
    stderr = daemon.stderr()
    assert "llama_model_loader" in stderr or "load_tensors" in stderr  # the engine's log went here


def test_flags_take_both_forms_and_n_ctx_is_clamped(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path]
) -> None:
    daemon = spawn(
        native.binary("qwen35"),
        test_models["qwen3"],
        "--n-ctx",
        "512",
        "--threads=1",
        "--seed",
        "7",
        "--n-gpu-layers=0",
    )
    assert daemon.ready()["n_ctx"] == "512"
    assert daemon.quit() == 0

    # The qwen3 test model was trained (so to speak) for 8192 positions.
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=100000")
    ready = daemon.ready()
    assert (ready["n_ctx"], ready["n_ctx_train"]) == ("8192", "8192")
    assert "using 8192" in daemon.stderr()
    assert daemon.quit() == 0


def test_exit_is_quit_and_eof_exits_quietly(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"])
    daemon.ready()
    assert daemon.command("exit") == "ok quit"
    assert daemon.wait() == 0

    daemon = spawn(native.binary("qwen35"), test_models["qwen3"])
    daemon.ready()
    assert daemon.proc.stdin is not None
    daemon.proc.stdin.close()
    assert daemon.wait() == 0
    assert daemon.proc.stdout is not None
    assert daemon.proc.stdout.read() == b""


def test_bad_flags_exit_2(spawn: Any, native: NativeBuild, test_models: dict[str, Path]) -> None:
    binary = native.binary("qwen35")
    cases = [
        ("--bogus=1",),
        ("--n-ctx=abc",),
        ("--n-ctx",),  # no value
        ("--stream-fd=1",),  # the protocol channel is not a stream
        ("--stream-fd=987",),  # not an open descriptor
        ("extra.gguf",),  # one model path only
    ]
    for args in cases:
        daemon = spawn(binary, test_models["qwen3"], *args, stream=False)
        line = daemon.readline()
        assert daemon.err(line) == "bad_flag", (args, line)
        assert daemon.wait() == 2, args
        assert "bad_flag" in daemon.stderr()

    daemon = spawn(binary, "--threads=2", stream=False)  # no model path at all
    assert daemon.err(daemon.readline()) == "bad_flag"
    assert daemon.wait() == 2


def test_model_problems_exit_3(spawn: Any, native: NativeBuild, tmp_path: Path) -> None:
    binary = native.binary("qwen35")
    daemon = spawn(binary, tmp_path / "missing.gguf")
    line = daemon.readline()
    assert daemon.err(line) == "model_not_found"
    assert daemon.wait() == 3

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"this is not a gguf file at all" * 10)
    daemon = spawn(binary, junk)
    assert daemon.err(daemon.readline()) == "load_failed"
    assert daemon.wait() == 3
    assert daemon.stdout_lines == [daemon.stdout_lines[0]]


def test_stats_counts_requests(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=256")
    daemon.ready()
    before = daemon.ok(daemon.command("stats"), "stats")
    assert before["requests"] == "0" and before["tokens_generated"] == "0"
    daemon.stream_command("generate ids:1,2,3 5 ignore_eos=1")
    daemon.stream_command("generate ids:4,5 3 ignore_eos=1")
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert stats["n_ctx"] == "256"
    assert stats["n_vocab"] == "151936"
    assert stats["requests"] == "2"
    assert stats["tokens_prompt"] == "5"
    assert stats["tokens_generated"] == "8"
    assert int(stats["rss_kb"]) > 10_000
    assert daemon.quit() == 0


def test_stats_fields_and_msgpack(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path], tmp_path: Path
) -> None:
    import msgpack

    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=256", "--threads=1")
    daemon.ready()
    fresh = daemon.ok(daemon.command("stats"), "stats")
    assert list(fresh)[: len(KEYS)] == KEYS  # PROTOCOL.md 5.3's fixed keys, in its order
    assert (fresh["last_prefill_tok_s"], fresh["slots_used"], fresh["parked"]) == ("0.0", "0", "0")
    daemon.stream_command("generate ids:1,2,3,4 6 ignore_eos=1 snap=4:2")
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert (stats["requests"], stats["tokens_prompt"], stats["tokens_generated"]) == ("1", "4", "6")
    assert stats["slots_used"] == "1" and int(stats["slots_bytes"]) > 0
    assert float(stats["last_prefill_tok_s"]) > 0 and float(stats["last_decode_tok_s"]) > 0
    assert int(stats["model_bytes"]) > 10_000_000  # the 26 MB test model's weights
    assert float(stats["uptime_s"]) >= 0

    path = tmp_path / "stats.msgpack"
    reply = daemon.command(f"stats path={path}")
    fields = daemon.ok(reply, "stats")
    assert next(iter(fields)) == "path" and fields["path"] == str(path)
    table = msgpack.unpackb(path.read_bytes())
    assert list(table)[: len(KEYS)] == KEYS
    assert set(table) == set(fields) - {"path"}
    for key, value in table.items():  # numbers as numbers, equal to the reply's
        assert isinstance(value, (int, float)) and not isinstance(value, bool), key
        if isinstance(value, int) and key not in ("rss_kb",):
            assert str(value) == fields[key], key
    assert isinstance(table["uptime_s"], float) and isinstance(table["requests"], int)
    assert daemon.err(daemon.command("stats path=/nonexistent-dir/stats.msgpack")) == "io_failed"
    assert daemon.err(daemon.command("stats colour=red")) == "bad_args"
    assert daemon.quit() == 0
