"""Command errors (PROTOCOL.md 6): one err line each, exactly one -1 for stream commands,
and the daemon carries on afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

STREAM_ERRORS = [
    # (command, code)
    ("generate", "bad_args"),  # no arguments
    ("generate ids:2,3", "bad_args"),  # no n_gen
    ("generate ids:2,3 0", "bad_args"),  # n_gen >= 1
    ("generate ids:2,3 4 5", "bad_args"),  # extra positional
    ("generate ids:2,3 4 temp=hot", "bad_args"),
    ("generate ids:2,3 4 top_p=1.5", "bad_args"),
    ("generate ids:2,3 4 temp=inf", "bad_args"),  # plain decimals only
    ("generate ids:2,3 4 top_k=0x10", "bad_args"),
    ("generate ids:+2,3 4", "bad_args"),
    ("generate ids:2,3, 4", "bad_args"),
    ("generate ids:99999999999 4", "bad_args"),  # not an int32
    ("generate ids:2,3 4 seed=4294967296", "bad_args"),
    ("generate ids:2,3 4 colour=red", "bad_args"),  # unknown option
    ("generate ids:2,3 4 seed=1 seed=2", "bad_args"),  # option twice
    ("generate ids:2,x 4", "bad_args"),  # malformed id list
    ("generate ids:2,3 4 stop=a", "bad_args"),
    ("generate ids:2%zz 4", "bad_args"),  # bad percent-encoding
    ("generate ids: 4", "empty_prompt"),
    ("generate ids:2,262144 4", "bad_token"),  # == n_vocab
    ("generate ids:2,-5 4", "bad_token"),
    ("generate ids:2 4 stop=300000", "bad_token"),
    ("generate ids:2,3 4095", "context_overflow"),  # 2 + 4095 > n_ctx=4096
    ("generate /nonexistent/prompt.bin 4", "bad_token_file"),
    ("tokenize", "bad_args"),
    ("tokenize text:hi special=2", "bad_args"),
    ("tokenize /nonexistent/prompt.txt", "bad_text_file"),
    ("tokenize text:%FF%FE", "bad_args"),  # not UTF-8 once decoded
]


@pytest.mark.parametrize(("command", "code"), STREAM_ERRORS)
def test_stream_command_errors_write_one_terminator(gemma: Any, command: str, code: str) -> None:
    values, reply = gemma.stream_command(command)
    assert values == []
    assert gemma.err(reply) == code, reply
    assert gemma.stream_is_empty()  # exactly one -1


def test_bad_token_file_sizes(gemma: Any, tmp_path: Path) -> None:
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x02\x00\x00\x00\x01")  # 5 bytes
    values, reply = gemma.stream_command(f"generate {odd} 4")
    assert values == [] and gemma.err(reply) == "bad_token_file"
    assert "multiple of 4" in reply
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    values, reply = gemma.stream_command(f"generate {empty} 4")
    assert values == [] and gemma.err(reply) == "empty_prompt"
    assert gemma.stream_is_empty()


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("frobnicate", "unknown_command"),
        ("GENERATE ids:2 4", "unknown_command"),
        ("detokenize", "bad_args"),
        ("detokenize ids:99999999", "bad_token"),
        ("detokenize /nonexistent.bin", "bad_token_file"),
        ("vocab", "bad_args"),
        ("vocab /nonexistent-dir/table.msgpack", "io_failed"),
        ("stats now", "bad_args"),
        ("cancel everything", "bad_args"),
        ("quit now", "bad_args"),  # and the daemon stays up
    ],
)
def test_other_command_errors_write_nothing_to_the_stream(
    gemma: Any, command: str, code: str
) -> None:
    reply = gemma.command(command)
    assert gemma.err(reply) == code, reply
    assert gemma.stream_is_empty()


def test_the_daemon_carries_on_after_errors(gemma: Any) -> None:
    for command, _ in STREAM_ERRORS[:5]:
        gemma.stream_command(command)
    tokens, reply = gemma.stream_command("generate ids:2,9259,1902 4 ignore_eos=1")
    assert len(tokens) == 4 and gemma.ok(reply, "generate")["n_gen"] == "4"


def test_no_stream_fd(spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], stream=False)
    daemon.ready()
    assert daemon.err(daemon.command("generate ids:1,2 4")) == "no_stream_fd"
    assert daemon.err(daemon.command("tokenize text:hi")) == "no_stream_fd"
    # Commands that do not stream still work.
    assert daemon.command("detokenize ids:9707") == "ok detokenize text=Hello"
    assert daemon.quit() == 0


def test_blank_lines_get_no_reply(gemma: Any) -> None:
    gemma.send("")
    gemma.send("   ")
    assert gemma.command("cancel") == "ok cancel running=0"
