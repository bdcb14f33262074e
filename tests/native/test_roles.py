"""Every role executable: loads the architectures it serves, refuses the others
(PROTOCOL.md section 1 table), and the generating roles generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.native import sources

# What each role serves and lists, as PROTOCOL.md (sections 1 and 5) says; test_one_source.py
# holds the native and Python copies to the same document.
SERVES = {role.name: ",".join(role.architectures) for role in sources.doc_roles()}
CAPS = {role: ",".join(caps) for role, caps in sources.doc_capabilities().items()}

# role, test model, ready fields we expect
LOADS = [
    ("qwen35", "qwen35", {"arch": "qwen35", "vocab": "151936", "n_ctx_train": "8192"}),
    ("qwen35", "qwen3", {"arch": "qwen3", "vocab": "151936"}),
    ("laguna", "laguna", {"arch": "laguna", "vocab": "50257", "n_ctx_train": "4096"}),
    ("laguna", "deepseek4", {"arch": "deepseek4", "vocab": "32256"}),
    ("pflash", "qwen3", {"arch": "qwen3"}),
    ("pflash", "qwen35", {"arch": "qwen35"}),
    (
        "ds4_shard",
        "deepseek4",
        {"arch": "deepseek4", "vocab": "32256", "capabilities": "stats,quit"},
    ),
]

# role, a test model of an architecture it does not serve
REFUSALS = [
    ("qwen35", "laguna"),
    ("qwen35", "deepseek4"),
    ("qwen35", "dflash"),
    ("laguna", "qwen35"),
    ("pflash", "laguna"),
    ("pflash", "deepseek4"),
    ("ds4_shard", "qwen3"),
]


@pytest.mark.parametrize(("role", "model", "expected"), LOADS)
def test_role_loads_its_model(
    role: str,
    model: str,
    expected: dict[str, str],
    spawn: Any,
    native: Any,
    test_models: dict[str, Path],
) -> None:
    # The shard starts an RPC server: give it a port of its own.
    listen = (f"--rpc-listen=127.0.0.1:{free_port()}",) if role == "ds4_shard" else ()
    daemon = spawn(native.binary(role), test_models[model], "--n-ctx=512", *listen)
    ready = daemon.ready()
    assert ready["role"] == role
    assert ready["protocol"] == "1" and ready["backend"] == "cpu"
    assert {key: ready[key] for key in expected} == expected
    if role != "ds4_shard":
        assert ready["capabilities"] == CAPS[role]
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert stats["n_vocab"] == ready["vocab"]
    assert daemon.quit() == 0


@pytest.mark.parametrize(("role", "model"), REFUSALS)
def test_role_refuses_other_architectures(
    role: str, model: str, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    path = test_models[model]
    daemon = spawn(native.binary(role), path)
    line = daemon.readline()
    binary = native.binary(role).name
    assert line == f"err wrong_arch {binary} serves {SERVES[role]}; {path} is {model}"
    assert daemon.wait() == 3
    assert daemon.proc.stdout is not None and daemon.proc.stdout.read() == b""  # one line only
    stderr = daemon.stderr()
    assert "wrong_arch" in stderr and "llama_model_load" not in stderr  # refused before loading


def test_wrong_arch_with_the_default_model(spawn: Any, native: Any, default_model: Path) -> None:
    daemon = spawn(native.binary("laguna"), default_model)
    assert daemon.readline().endswith(f"; {default_model} is gemma3")
    assert daemon.wait() == 3


@pytest.mark.parametrize(
    ("role", "model"), [("laguna", "laguna"), ("pflash", "qwen3"), ("pflash", "qwen35")]
)
def test_generating_roles_generate(
    role: str, model: str, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary(role), test_models[model], "--n-ctx=512")
    daemon.ready()
    prompt, _ = daemon.stream_command("tokenize text:Hello%20world")
    assert prompt
    command = "generate ids:" + ",".join(map(str, prompt)) + " 12 ignore_eos=1"
    tokens, reply = daemon.stream_command(command)
    assert len(tokens) == 12 and daemon.ok(reply, "generate")["finish"] == "length"
    again, _ = daemon.stream_command(command)
    assert again == tokens
    sampled, _ = daemon.stream_command(command + " temp=0.9 seed=3")
    assert len(sampled) == 12
    assert daemon.quit() == 0


def test_ds4_shard_answers_only_its_commands(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(
        native.binary("ds4_shard"),
        test_models["deepseek4"],
        "--n-ctx=100000",
        f"--rpc-listen=127.0.0.1:{free_port()}",
    )
    ready = daemon.ready()
    assert ready["n_ctx"] == "4096"  # clamped to n_ctx_train, although it holds no context
    # Commands of the protocol that the shard does not serve (PROTOCOL.md 5); stream
    # commands still write their one -1.
    for line in ("generate ids:1,2 4", "tokenize text:hi"):
        values, reply = daemon.stream_command(line)
        assert values == [] and daemon.err(reply) == "unsupported"
    assert daemon.stream_is_empty()
    stats = daemon.ok(daemon.command("stats"), "stats")
    assert stats["requests"] == "0" and int(stats["rss_kb"]) > 0
    assert daemon.quit() == 0
