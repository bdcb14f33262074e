"""The validated configuration: ``LucernaConfig`` of ``ServerSettings`` and ``ModelSettings``.

Defaults come from the key declarations (``_keys``), never written here a second time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from daemons.default_model import CHAT_MODEL_NAME, DEFAULT_MODEL_NAME
from orchestrator.config._keys import (
    CHAT_MODEL_PATH,
    DEFAULT_MODEL_PATH,
    HostKeys,
    ModelKeys,
    ServerKeys,
)
from orchestrator.prefill import PrefillSettings
from orchestrator.supervisor import RestartPolicy

__all__ = ["EMBEDDED_MODEL_NAMES", "HostSettings", "LucernaConfig", "ModelSettings",
           "ServerSettings", "ShardSettings"]

EMBEDDED_MODEL_NAMES = {CHAT_MODEL_PATH: CHAT_MODEL_NAME, DEFAULT_MODEL_PATH: DEFAULT_MODEL_NAME}
"""Embedded models by their ``path`` word; without a config both are served, the chat
model first and as the default of requests that name no model."""


@dataclass(frozen=True)
class ServerSettings:
    """The ``[server]`` table: where and how the HTTP front end listens."""

    host: str = ServerKeys.HOST.default
    port: int = ServerKeys.PORT.default
    api_keys: tuple[str, ...] = ()
    """Accepted keys; empty means no authentication (only sensible on loopback)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed by CORS; empty means no CORS headers at all."""
    shutdown_timeout: float = ServerKeys.SHUTDOWN_TIMEOUT.default
    """Seconds in-flight requests may take to finish after SIGTERM (hypercorn's 3 s is
    far too short for a long stream)."""
    max_body_bytes: int = ServerKeys.MAX_BODY_BYTES.default
    keepalive_interval: float = ServerKeys.KEEPALIVE_INTERVAL.default
    """Seconds a stream may go without an event before it sends a keep-alive (a long
    prefill); 0 sends none (orchestrator/keepalive.py)."""
    log_level: str | None = None
    cache_ram_mib: int | None = ServerKeys.CACHE_RAM_MIB.default
    """Host RAM the prefix cache may hold, shared by the models; None: a quarter of the
    memory available at start, at most 8 GiB; 0: no prefix cache (orchestrator/prefix_cache.py)."""
    kv_cache_dir: str | None = ServerKeys.KV_CACHE_DIR.default
    """Where the prefix cache keeps snapshots across restarts; None: RAM only."""
    kv_cache_dir_mib: int = ServerKeys.KV_CACHE_DIR_MIB.default
    """Disk budget of ``kv_cache_dir``, shared by the models; 0: no limit."""
    default_model: str | None = None
    """The model of a request that names none; None: only a lone model is a default."""
    group_memory_mib: Mapping[str, int] = field(default_factory=dict)
    """Per group of models (``[[models]].group``), the memory its awake models may hold
    together; a wake that would exceed it parks the least recently used idle model of
    the group first. A group not listed has no limit."""


@dataclass(frozen=True)
class HostSettings:
    """One ``[[hosts]]`` table: a machine whose daemons are started through ``launcher``.

    Its daemons speak on one channel (PROTOCOL.md 10): the launcher needs to carry only
    stdin, stdout and stderr, as ssh does.
    """

    name: str
    launcher: tuple[str, ...]
    link_timeout_s: float
    """Nothing heard from a daemon there this long: the link is lost (``link_timeout``)."""
    keepalive_s: float
    """How often its daemons write a keep-alive (``keepalive``)."""
    backend: str = HostKeys.BACKEND.default
    """What that host's daemons were built for (``LUCERNA_BACKEND`` there); the ready
    line's ``backend`` must say the same."""
    daemon_dir: str | None = None
    """The executables' directory there; None: ``<checkout>/build/native-<backend>/bin``."""
    checkout: str | None = None
    """The Lucerna checkout there; None: the same path as this machine's."""
    model_dir: str | None = None
    """Where model files live there (looked up by file name); None: the local copy's
    directory (a shared or mirrored file system)."""
    scratch_dir: str = HostKeys.SCRATCH_DIR.default
    remote_shell: bool = HostKeys.REMOTE_SHELL.default


@dataclass(frozen=True)
class ShardSettings:
    """One ``[[shards]]`` table: a ds4_shard daemon that serves its device over ggml RPC
    to the targets that list it in ``shards`` (PROTOCOL.md 5.8)."""

    name: str
    path: str
    """The deepseek4 GGUF it starts with (absolute once loaded; a local copy for a host)."""
    listen: str
    """``HOST:PORT`` of its RPC server, as the targets dial it (``--rpc-listen``)."""
    host: str | None = None
    threads: int | None = None
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelSettings:
    """One ``[[models]]`` table, validated but not yet resolved against the disk."""

    name: str
    path: str
    """``"default"`` or an absolute GGUF path (relative ones are resolved on load)."""
    role: str | None = None
    n_ctx: int | None = ModelKeys.N_CTX.default
    threads: int | None = ModelKeys.THREADS.default
    n_gpu_layers: int | None = ModelKeys.N_GPU_LAYERS.default
    chunk: int | None = None
    slots: int | None = None
    draft: str | None = None
    """A DFlash draft GGUF (absolute once loaded): speculative decoding; None: none."""
    draft_block_size: int | None = None
    """Tokens per verify step; None: the draft's own ``dflash.block_size`` (16 for lookup
    alone)."""
    lookup: str = ModelKeys.LOOKUP.default
    """Prompt lookup: ``off``, ``opt-in`` (per request) or ``on`` (per request opt-out)."""
    draft_tree: int = ModelKeys.DRAFT_TREE.default
    """Tree verify's node budget for the draft's proposals; 0: chain verify."""
    draft_tree_branches: int | None = None
    """Tree verify's most branches; None: the daemon's default."""
    deterministic: bool = ModelKeys.DETERMINISTIC.default
    """Batch-invariant kernels (``--deterministic=on``, docs/deterministic.md)."""
    extra_args: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    shards: tuple[str, ...] = ()
    """``[[shards]]`` whose devices the target adds, as RPC0, RPC1, ... (``--rpc``)."""
    override_tensor: tuple[str, ...] = ()
    """``REGEX=DEVICE`` tensor placements (``--override-tensor``), e.g. onto a shard."""
    host: str | None = None
    """The ``[[hosts]]`` entry that runs the daemon; None: this machine. ``path`` is then
    a local copy whose header the front end reads; the daemon loads the host's file."""
    queue_limit: int = ModelKeys.QUEUE_LIMIT.default
    parallel: int | None = ModelKeys.PARALLEL.default
    """Requests that generate at once in one daemon (``--parallel``, PROTOCOL.md 9); None:
    as many as fit the memory (``orchestrator.parallel_default``)."""
    spare_sequences: int | None = ModelKeys.SPARE_SEQUENCES.default
    """Daemon sequences beyond ``parallel`` that only keep conversations between their
    turns (docs/batching.md); None: as many as ``parallel`` where the memory allows
    (``orchestrator.parallel_default.choose_spare_sequences``)."""
    max_output_tokens: int | None = ModelKeys.MAX_OUTPUT_TOKENS.default
    """Cap on the tokens of one request, whatever it asks; None: a quarter of n_ctx."""
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    prefill: PrefillSettings | None = None
    """PFlash speculative prefill (``[models.prefill]``); None: never compressed."""
    load: str = ModelKeys.LOAD.default
    """``boot``: started with the server; ``on_demand``: at its first request."""
    idle_s: float | None = None
    """Unused this long, the model is parked or stopped (``idle_action``); None: never."""
    idle_action: str = ModelKeys.IDLE_ACTION.default
    group: str = ModelKeys.GROUP.default
    """Models of one group share a device and its ``group_memory_mib`` budget."""
    chat_template_file: str | None = None
    """A Jinja chat template to use instead of the GGUF's (absolute once loaded)."""
    reasoning_effort: str | None = None
    """A thinking model's default effort when a request names none (EFFORT_BUDGETS)."""
    reasoning_budget: int | None = None
    """Its default reasoning budget in tokens (over the effort's); 0: no reasoning."""
    embeddings: str | None = None
    """``mean`` or ``last``: ``POST /v1/embeddings`` pools this model's hidden states so
    (PROTOCOL.md 5.11); None: the model serves no embeddings."""


@dataclass(frozen=True)
class LucernaConfig:
    server: ServerSettings
    models: tuple[ModelSettings, ...]
    hosts: tuple[HostSettings, ...] = ()
    shards: tuple[ShardSettings, ...] = ()
    source: str = "<config>"
    """Where it came from, for messages: a file path or ``command line``."""
