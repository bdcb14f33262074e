"""The four daemon roles: which executable, which GGUF architectures, how to launch.

The native executables are the source of truth for what they accept (they refuse a
wrong architecture themselves, see PROTOCOL.md §2); this table lets the front end
pick a role for a model and fail fast with a clear message before spawning anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from daemons.errors import ModelError

__all__ = ["DAEMON_ENV", "DEFAULT_SLOTS", "ROLES", "DaemonLaunch", "RoleSpec", "role_named",
           "target_role_for"]

DAEMON_ENV = {"GGML_NO_BACKTRACE": "1"}
"""Every daemon's environment, wherever it runs. On an engine assert ggml runs gdb for a
backtrace, and gdb then reads the daemon's stdin, which we hold open: the dying daemon
hung until its request timed out (seen: 600 s). Without the backtrace it aborts at once
and is restarted."""

DEFAULT_SLOTS = 64
"""The daemons' ``--slots`` default (PROTOCOL.md section 1); tests/native checks the copy."""


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
            summary="target: Qwen3.5/3.6 hybrid attention + Gated DeltaNet, with DFlash "
            "speculative decoding when given a draft; plain-attention models too",
            is_target=True,
        ),
        RoleSpec(
            name="laguna",
            executable="lucerna-laguna",
            architectures=frozenset({"laguna", "deepseek4"}),
            summary="target: the mixture-of-experts models (Laguna, DeepSeek V4; experts may "
            "stay in host memory or live on a ds4_shard over ggml RPC)",
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
            summary="expert shard: serves a device over ggml RPC, so a DeepSeek V4 target "
            "can keep its routed experts on another GPU or host",
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
    """Everything needed to start one daemon, except the stream fd (known at spawn).

    Each optional field is one flag of PROTOCOL.md section 1; None (or empty) leaves it
    to the daemon's default.
    """

    role: RoleSpec
    executable: Path | PurePosixPath
    """The daemon executable, a path on the host that runs it."""
    model: Path | PurePosixPath
    """The GGUF, a path on the host that runs the daemon."""
    n_ctx: int | None = None
    threads: int | None = None
    n_gpu_layers: int | None = None
    seed: int | None = None
    chunk: int | None = None
    """Prefill chunk; snapshots at multiples of it restore exactly (PROTOCOL.md 5.5)."""
    slots: int | None = None
    """Snapshot slots, numbered ``0 .. slots - 1``; None: ``DEFAULT_SLOTS``."""
    parallel: int | None = None
    """Sequences that generate at once over protocol 2 (PROTOCOL.md 9); None: one."""
    spare_sequences: int | None = None
    """With ``parallel``: sequences beyond it that only keep conversations between their
    turns (orchestrator/parallel_default.py); the daemon's ``--parallel`` is the sum."""
    checkpoint_mib: int | None = None
    """The most host memory the sequences' checkpoints hold together (PROTOCOL.md 5.10);
    None: no bound but 16 a sequence."""
    rpc: tuple[str, ...] = ()
    """``HOST:PORT`` of ggml RPC servers (e.g. a ds4_shard) whose devices the engine adds."""
    override_tensors: tuple[str, ...] = ()
    """``REGEX=DEVICE`` tensor placements, e.g. ``ffn_.*_exps=RPC0``."""
    experts_in_host: float | None = None
    """laguna: share in ``[0, 1]`` of MoE layers whose experts stay in host memory."""
    rpc_listen: str | None = None
    """ds4_shard: ``HOST:PORT`` its ggml RPC server listens on."""
    draft: Path | PurePosixPath | None = None
    """qwen35: a DFlash draft GGUF; every generation decodes speculatively (PROTOCOL.md 5.9)."""
    draft_block_size: int | None = None
    """Tokens per verify step; None: the draft's own ``dflash.block_size`` (16 for lookup
    alone)."""
    lookup: str | None = None
    """Prompt lookup (PROTOCOL.md 5.9): ``"opt-in"`` or ``"on"``; None: off."""
    draft_tree: int | None = None
    """Tree verify of the draft's proposals, at most this many a step (PROTOCOL.md 5.9,
    ``--draft-tree``); None: chain verify."""
    draft_tree_branches: int | None = None
    """With ``draft_tree``: its most branches; None: the daemon's default."""
    deterministic: bool = False
    """``--deterministic=on``: batch-invariant kernels (PROTOCOL.md section 1)."""
    parked: bool = False
    """``--parked=on``: start with the target parked, its vocabulary alone loaded
    (PROTOCOL.md 5.6); a tokenizer daemon starts so."""
    extra_args: tuple[str, ...] = ()
    # Prepended to argv, e.g. ("ssh", "host") or ("ip", "netns", "exec", "h2").
    launcher: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    channel: Literal["fds", "stdout"] = "fds"
    """How stream values come back: ``fds`` on an inherited stream fd (a local daemon);
    ``stdout`` framed on stdout beside the replies (``--channel=stdout``, PROTOCOL.md 10),
    for a launcher that carries only stdin and stdout, such as ssh."""
    keepalive_ms: int | None = None
    """One channel: the daemon's ``--keepalive-ms``; None: its default."""
    link_timeout_s: float | None = None
    """One channel: nothing heard from the daemon this long (not even a keep-alive) means
    the host or the link is gone: the launcher is killed and the daemon counts as dead.
    None: no watchdog."""
    host: str | None = None
    """The ``[[hosts]]`` entry it runs on, for messages; None: this machine."""
    remote_shell: bool = False
    scratch_dir: PurePosixPath | None = None
    """A daemon on another host: where, there, it writes the files a command outputs
    (piece table, embeddings), which the client then reads through the launcher. None:
    the daemon shares this machine's files. Inputs never go by file to such a daemon."""
    """The launcher hands the rest of argv to a shell on the host as one line, as ssh
    does: each word is shell-quoted and ``env`` travels as an ``env NAME=value`` prefix."""

    def __post_init__(self) -> None:
        for name, items in (("rpc", self.rpc), ("override_tensors", self.override_tensors)):
            if isinstance(items, str) or any(not item or "," in item for item in items):
                raise ValueError(f"{name} must be a tuple of non-empty entries without ',', "
                                 f"got {items!r}")
        if any("=" not in item for item in self.override_tensors):
            raise ValueError(f"override_tensors entries are REGEX=DEVICE, got "
                             f"{self.override_tensors!r}")
        if self.experts_in_host is not None and not 0 <= self.experts_in_host <= 1:
            raise ValueError(f"experts_in_host must be in [0, 1], got {self.experts_in_host}")
        if self.channel not in ("fds", "stdout"):
            raise ValueError(f"channel must be 'fds' or 'stdout', got {self.channel!r}")
        if self.draft_block_size is not None and self.draft is None and self.lookup is None:
            raise ValueError("draft_block_size needs a draft or lookup")
        if self.lookup not in (None, "opt-in", "on"):
            raise ValueError(f"lookup must be 'opt-in' or 'on' (None: off), got {self.lookup!r}")
        if self.draft_tree is not None and self.draft is None:
            raise ValueError("draft_tree needs a draft")
        if self.draft_tree_branches is not None and self.draft_tree is None:
            raise ValueError("draft_tree_branches needs draft_tree")
        if self.spare_sequences and (self.parallel or 1) == 1:
            raise ValueError("spare_sequences needs parallel above 1")

    @property
    def daemon_sequences(self) -> int:
        """The daemon's sequences: ``parallel`` and the spare ones."""
        return (self.parallel or 1) + (self.spare_sequences or 0)

    def argv(self, stream_fd: int | None) -> list[str]:
        """The command line: the launcher, then the daemon's (shell-quoted if ``remote_shell``)."""
        words = self.daemon_argv(stream_fd)
        if self.remote_shell:
            env = [f"{name}={value}" for name, value in sorted({**DAEMON_ENV, **self.env}.items())]
            words = [shlex.quote(word) for word in ["env", *env, *words]]
        return [*self.launcher, *words]

    def daemon_argv(self, stream_fd: int | None) -> list[str]:
        """The daemon's own command line, as its host runs it."""
        args: list[str] = [str(self.executable), str(self.model)]
        if self.channel == "stdout":
            args.append("--channel=stdout")
        elif stream_fd is not None:
            args.append(f"--stream-fd={stream_fd}")
        options: Sequence[tuple[str, object]] = (
            ("n-ctx", self.n_ctx),
            ("threads", self.threads),
            ("n-gpu-layers", self.n_gpu_layers),
            ("seed", self.seed),
            ("chunk", self.chunk),
            ("slots", self.slots),
            ("parallel", self.daemon_sequences if self.parallel is not None else None),
            ("checkpoint-mib", self.checkpoint_mib),
            ("rpc", ",".join(self.rpc) or None),
            ("override-tensor", ",".join(self.override_tensors) or None),
            ("experts-in-host", self.experts_in_host),
            ("rpc-listen", self.rpc_listen),
            ("draft", self.draft),
            ("draft-block-size", self.draft_block_size),
            ("draft-tree", self.draft_tree),
            ("draft-tree-branches", self.draft_tree_branches),
            ("deterministic", "on" if self.deterministic else None),
            # The mode needs each sequence's cells in solo order: one KV stream each
            # (PROTOCOL.md section 1); n_ctx is already n_ctx per sequence times parallel.
            ("kv-unified", "off" if self.deterministic and (self.parallel or 1) > 1 else None),
            ("lookup", self.lookup),
            ("parked", "on" if self.parked else None),
            ("keepalive-ms", self.keepalive_ms if self.channel == "stdout" else None),
        )
        args.extend(f"--{name}={value}" for name, value in options if value is not None)
        args.extend(self.extra_args)
        return args
