"""The four daemon roles: which executable, which GGUF architectures, how to launch.

The native executables are the source of truth for what they accept (they refuse a
wrong architecture themselves, see PROTOCOL.md §2); this table lets the front end
pick a role for a model and fail fast with a clear message before spawning anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from daemons.errors import ModelError

__all__ = ["ROLES", "DaemonLaunch", "RoleSpec", "role_named", "target_role_for"]


@dataclass(frozen=True)
class RoleSpec:
    name: str
    executable: str
    architectures: frozenset[str]
    summary: str
    is_target: bool  # serves generation requests (as opposed to drafting or sharding)


ROLES: dict[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec(
            name="qwen35",
            executable="lucerna-qwen35",
            architectures=frozenset({"qwen35", "qwen35moe", "qwen3", "gemma3", "llama"}),
            summary="target: Qwen3.5/3.6 hybrid attention + Gated DeltaNet (DFlash later); "
            "plain-attention models are served autoregressively",
            is_target=True,
        ),
        RoleSpec(
            name="laguna",
            executable="lucerna-laguna",
            architectures=frozenset({"laguna"}),
            summary="target: the Laguna mixture-of-experts model",
            is_target=True,
        ),
        RoleSpec(
            name="pflash",
            executable="lucerna-pflash",
            architectures=frozenset({"qwen3", "qwen35", "gemma3", "llama"}),
            summary="drafter: scores and compresses long prompts (speculative prefill)",
            is_target=False,
        ),
        RoleSpec(
            name="ds4_shard",
            executable="lucerna-ds4-shard",
            architectures=frozenset({"deepseek4"}),
            summary="expert shard: serves DeepSeek V4 experts to another daemon",
            is_target=False,
        ),
    )
}


def role_named(name: str) -> RoleSpec:
    try:
        return ROLES[name]
    except KeyError:
        raise ModelError(f"unknown daemon role {name!r}; roles: {', '.join(ROLES)}") from None


def target_role_for(architecture: str) -> RoleSpec:
    """The role that serves generation for a model of ``architecture``."""
    for spec in ROLES.values():
        if spec.is_target and architecture in spec.architectures:
            return spec
    served = sorted(a for s in ROLES.values() if s.is_target for a in s.architectures)
    raise ModelError(
        f"no Lucerna target daemon serves GGUF architecture {architecture!r}; "
        f"served: {', '.join(served)}"
    )


@dataclass(frozen=True)
class DaemonLaunch:
    """Everything needed to start one daemon, except the stream fd (known at spawn)."""

    role: RoleSpec
    executable: Path
    model: Path
    n_ctx: int | None = None
    threads: int | None = None
    n_gpu_layers: int | None = None
    seed: int | None = None
    extra_args: tuple[str, ...] = ()
    # Prepended to argv, e.g. ("ssh", "host") or ("ip", "netns", "exec", "h2").
    launcher: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, stream_fd: int | None) -> list[str]:
        args: list[str] = [*self.launcher, str(self.executable), str(self.model)]
        if stream_fd is not None:
            args.append(f"--stream-fd={stream_fd}")
        options: Sequence[tuple[str, int | None]] = (
            ("n-ctx", self.n_ctx),
            ("threads", self.threads),
            ("n-gpu-layers", self.n_gpu_layers),
            ("seed", self.seed),
        )
        args.extend(f"--{name}={value}" for name, value in options if value is not None)
        args.extend(self.extra_args)
        return args
