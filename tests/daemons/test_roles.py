"""daemons.roles: which role serves which architecture, and the argv of a launch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import protocol
from daemons.errors import ModelError
from daemons.roles import ROLES, DaemonLaunch, role_named, target_role_for

DOC = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()


def test_the_roles_table_matches_protocol_md() -> None:
    rows = re.findall(
        r"^\| `([a-z0-9_]+)` \| `(lucerna-[a-z0-9-]+)` \| ([^|]+) \|$", DOC, flags=re.MULTILINE
    )
    assert {role for role, _, _ in rows} == set(ROLES)
    for role, executable, serves in rows:
        spec = ROLES[role]
        assert spec.executable == executable
        # The architectures are the backquoted words before any parenthesis.
        assert spec.architectures == set(re.findall(r"`([a-z0-9]+)`", serves.split("(")[0]))


@pytest.mark.parametrize(
    ("architecture", "role"),
    [("qwen35", "qwen35"), ("gemma3", "qwen35"), ("laguna", "laguna"), ("deepseek4", "laguna")],
)
def test_target_role_for(architecture: str, role: str) -> None:
    assert target_role_for(architecture) is ROLES[role]


def test_no_target_for_an_unknown_architecture() -> None:
    with pytest.raises(ModelError, match="deepseek4"):  # the message lists what is served
        target_role_for("mamba")


def _launch(role: str = "laguna", **fields: Any) -> DaemonLaunch:
    return DaemonLaunch(
        role=role_named(role), executable=Path("/bin/d"), model=Path("/m.gguf"), **fields
    )


def test_argv_of_a_bare_launch() -> None:
    assert _launch().argv(stream_fd=None) == ["/bin/d", "/m.gguf"]
    assert _launch().argv(stream_fd=7) == ["/bin/d", "/m.gguf", "--stream-fd=7"]


def test_argv_maps_every_field_to_its_protocol_md_flag() -> None:
    launch = _launch(
        n_ctx=2048,
        threads=4,
        n_gpu_layers=99,
        seed=7,
        chunk=8,
        slots=16,
        rpc=("10.0.0.2:50052", "10.0.0.3:50052"),
        override_tensors=("ffn_.*_exps=RPC0", "token_embd=CPU"),
        experts_in_host=0.25,
        rpc_listen="127.0.0.1:50052",
        extra_args=("--max-line=4096",),
        launcher=("nice",),
    )
    argv = launch.argv(stream_fd=5)
    assert argv == [
        "nice",
        "/bin/d",
        "/m.gguf",
        "--stream-fd=5",
        "--n-ctx=2048",
        "--threads=4",
        "--n-gpu-layers=99",
        "--seed=7",
        "--chunk=8",
        "--slots=16",
        "--rpc=10.0.0.2:50052,10.0.0.3:50052",
        "--override-tensor=ffn_.*_exps=RPC0,token_embd=CPU",
        "--experts-in-host=0.25",
        "--rpc-listen=127.0.0.1:50052",
        "--max-line=4096",
    ]
    documented = set(re.findall(r"^\| `(--[a-z-]+)=", DOC, flags=re.MULTILINE))
    assert {arg.split("=", 1)[0] for arg in argv[3:]} <= documented


def test_argv_of_a_shard() -> None:
    shard = _launch("ds4_shard", rpc_listen="0.0.0.0:50052")
    assert shard.argv(stream_fd=None) == ["/bin/d", "/m.gguf", "--rpc-listen=0.0.0.0:50052"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rpc": "h:1"}, "rpc must be a tuple"),
        ({"rpc": ("h:1,h:2",)}, "rpc must be a tuple"),
        ({"override_tensors": ("",)}, "override_tensors must be"),
        ({"override_tensors": ("ffn_.*_exps",)}, "REGEX=DEVICE"),
        ({"experts_in_host": 1.5}, "experts_in_host"),
        ({"experts_in_host": -0.1}, "experts_in_host"),
    ],
)
def test_launch_refuses_what_the_daemon_would_misread(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _launch(**fields)
