"""The configuration file: one TOML schema for the server and the models it serves.

``load_config`` reads and validates a file; ``parse_config`` validates an already
parsed table (tests, flags turned into a config). Every mistake is a ``ConfigError``
whose message names the file, the key and the fix::

    configs/lucerna.toml: models[1].n_ctx: expected an integer >= 16, got "4k".
    Fix: write the context size in tokens, e.g. n_ctx = 4096.

The schema (configs/lucerna.toml is a commented example)::

    [server]                      all keys optional
    host, port, api_key | api_key_file, cors_origins, shutdown_timeout,
    max_body_bytes, keepalive_interval, log_level,
    cache_ram_mib, kv_cache_dir, kv_cache_dir_mib   (the prefix cache, per model)
    default_model                 the model of a request that names none
    group_memory_mib = { <group> = MiB }  memory a group's awake models may hold

    [[models]]                    one table per model; at least one
    name, path ("default" = the embedded gemma3-270m, "default-chat" = the embedded
    SmolLM2-135M-Instruct), role, n_ctx, threads,
    n_gpu_layers, chunk, slots, draft, draft_block_size, extra_args, launcher, env, queue_limit,
    max_output_tokens, restart = {max_failures, first_delay_s, base_delay_s,
    max_delay_s, healthy_after_s}, load ("boot" | "on_demand"), idle ("10m": park
    or stop it after that long unused), idle_action ("park" | "stop"), group,
    chat_template_file (a Jinja file instead of the GGUF's template), reasoning_effort
    ("none" .. "xhigh") and reasoning_budget (tokens): a thinking model's defaults,
    embeddings ("mean" | "last": serve POST /v1/embeddings with that pooling)

    [models.prefill]              PFlash compression / proxy mode; see
                                  orchestrator/prefill/_settings.py for the keys

``draft`` is a DFlash draft GGUF for the model's qwen35 daemon: every generation then
decodes speculatively (PROTOCOL.md 5.9). The daemon's benchmark-only oracle proposer has
no key here on purpose: it is a daemon flag and nothing an API client can reach.

Relative paths (``path``, ``draft``, ``api_key_file``) are relative to the file's directory.
Reading a model's GGUF header and choosing its daemon happen in ``build_models``,
which needs the native build; its errors are ``ConfigError`` too.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemons.default_model import CHAT_MODEL_NAME, DEFAULT_MODEL_NAME
from daemons.errors import DaemonsError
from daemons.roles import DEFAULT_SLOTS, ROLES, DaemonLaunch, RoleSpec, target_role_for
from orchestrator.api._http import MAX_BODY_BYTES
from orchestrator.errors import ConfigError
from orchestrator.keepalive import DEFAULT_KEEPALIVE_INTERVAL_S
from orchestrator.prefill import PrefillOverrides, PrefillSettings, parse_prefill_table
from orchestrator.prefix_cache import CacheSettings, PrefixCache, default_ram_bytes
from orchestrator.reasoning import EFFORT_BUDGETS, ReasoningControl
from orchestrator.supervisor import RestartPolicy

if TYPE_CHECKING:
    from daemons.gguf_info import GGUFInfo
    from daemons.native import NativeBuild
    from orchestrator.models import ServedModel

__all__ = [
    "CHAT_MODEL_PATH",
    "DEFAULT_MODEL_PATH",
    "EMBEDDED_MODEL_NAMES",
    "LOG_LEVELS",
    "LucernaConfig",
    "ModelSettings",
    "Overrides",
    "ServerSettings",
    "apply_overrides",
    "build_models",
    "load_config",
    "parse_config",
    "read_api_key_file",
]

DEFAULT_MODEL_PATH = "default"
"""The ``path`` that names the embedded gemma3-270m (assembled on first use)."""
CHAT_MODEL_PATH = "default-chat"
"""The ``path`` that names the embedded SmolLM2-135M-Instruct (fetched on first use)."""
EMBEDDED_MODEL_NAMES = {CHAT_MODEL_PATH: CHAT_MODEL_NAME, DEFAULT_MODEL_PATH: DEFAULT_MODEL_NAME}
"""Embedded models by their ``path`` word; without a config both are served, the chat
model first and as the default of requests that name no model."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class ServerSettings:
    """The ``[server]`` table: where and how the HTTP front end listens."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: tuple[str, ...] = ()
    """Accepted keys; empty means no authentication (only sensible on loopback)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed by CORS; empty means no CORS headers at all."""
    shutdown_timeout: float = 30.0
    """Seconds in-flight requests may take to finish after SIGTERM (hypercorn's 3 s is
    far too short for a long stream)."""
    max_body_bytes: int = MAX_BODY_BYTES
    keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL_S
    """Seconds a stream may go without an event before it sends a keep-alive (a long
    prefill); 0 sends none (orchestrator/keepalive.py)."""
    log_level: str | None = None
    cache_ram_mib: int | None = None
    """Host RAM the prefix cache may hold, shared by the models; None: a quarter of the
    memory available at start, at most 8 GiB; 0: no prefix cache (orchestrator/prefix_cache.py)."""
    kv_cache_dir: str | None = None
    """Where the prefix cache keeps snapshots across restarts; None: RAM only."""
    kv_cache_dir_mib: int = 0
    """Disk budget of ``kv_cache_dir``, shared by the models; 0: no limit."""
    default_model: str | None = None
    """The model of a request that names none; None: only a lone model is a default."""
    group_memory_mib: Mapping[str, int] = field(default_factory=dict)
    """Per group of models (``[[models]].group``), the memory its awake models may hold
    together; a wake that would exceed it parks the least recently used idle model of
    the group first. A group not listed has no limit."""


@dataclass(frozen=True)
class ModelSettings:
    """One ``[[models]]`` table, validated but not yet resolved against the disk."""

    name: str
    path: str
    """``"default"`` or an absolute GGUF path (relative ones are resolved on load)."""
    role: str | None = None
    n_ctx: int | None = 4096
    threads: int | None = None
    n_gpu_layers: int | None = None
    chunk: int | None = None
    slots: int | None = None
    draft: str | None = None
    """A DFlash draft GGUF (absolute once loaded): speculative decoding; None: none."""
    draft_block_size: int | None = None
    """Tokens per verify step; None: the draft's own ``dflash.block_size``."""
    extra_args: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    queue_limit: int = 16
    max_output_tokens: int | None = None
    """Cap on the tokens of one request, whatever it asks; None: a quarter of n_ctx."""
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    prefill: PrefillSettings | None = None
    """PFlash speculative prefill (``[models.prefill]``); None: never compressed."""
    load: str = "boot"
    """``boot``: started with the server; ``on_demand``: at its first request."""
    idle_s: float | None = None
    """Unused this long, the model is parked or stopped (``idle_action``); None: never."""
    idle_action: str = "park"
    group: str = "default"
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
    source: str = "<config>"
    """Where it came from, for messages: a file path or ``command line``."""


# --- validation -------------------------------------------------------------------------


class _Table:
    """One TOML table being validated; remembers which keys were read.

    ``finish`` refuses the keys nobody asked for, so a typo such as ``n_cxt`` is an
    error that suggests ``n_ctx`` instead of a silently ignored setting.
    """

    def __init__(self, data: Mapping[str, Any], where: str, source: str) -> None:
        self.data = data
        self.where = where
        self.source = source
        self._read: set[str] = set()

    def error(self, key: str | None, problem: str, fix: str) -> ConfigError:
        at = f"{self.where}.{key}" if key and self.where else (key or self.where)
        return ConfigError(f"{self.source}: {at}: {problem}. Fix: {fix}.")

    def get(self, key: str) -> Any:
        self._read.add(key)
        return self.data.get(key)

    def string(self, key: str, fix: str, *, required: bool = False) -> str | None:
        value = self.get(key)
        if value is None:
            if required:
                raise self.error(key, "is required", fix)
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {value!r}", fix)
        return value

    def integer(self, key: str, low: int, fix: str, *, high: int | None = None) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        if (isinstance(value, bool) or not isinstance(value, int) or value < low
                or (high is not None and value > high)):
            raise self.error(key, f"expected an integer {bound}, got {value!r}", fix)
        return value

    def number(self, key: str, low: float, fix: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
            raise self.error(key, f"expected a number >= {low:g}, got {value!r}", fix)
        return float(value)

    def strings(self, key: str, fix: str) -> tuple[str, ...] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, f"expected a list of non-empty strings, got {value!r}", fix)
        return tuple(value)

    def table(self, key: str, fix: str) -> Mapping[str, Any] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {value!r}", fix)
        return value

    def finish(self) -> None:
        for key in self.data:
            if key in self._read:
                continue
            close = difflib.get_close_matches(key, sorted(self._read), n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                f"known keys: {', '.join(sorted(self._read))}")
            raise self.error(key, "unknown key", f"remove it or correct it ({hint})")


def load_config(path: str | Path) -> LucernaConfig:
    """Read and validate a TOML config file; ``ConfigError`` says what to fix."""
    path = Path(path).expanduser()
    source = str(path)
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config file: {exc.strerror or exc}. "
                          "Fix: pass an existing file to --config (configs/lucerna.toml "
                          "is a commented example).") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}. Fix: correct the syntax there "
                          "(strings need quotes; tables are [server] and [[models]]).") from None
    return parse_config(data, source=source, base_dir=path.parent)


def parse_config(data: Mapping[str, Any], *, source: str = "<config>",
                 base_dir: Path | None = None) -> LucernaConfig:
    """Validate a parsed config table; relative paths resolve against ``base_dir``."""
    base = base_dir if base_dir is not None else Path.cwd()
    top = _Table(data, "", source)
    server_data = top.table("server", "write [server] as a table of settings")
    server = _server_settings(_Table(server_data or {}, "server", source), base)
    models_data = top.get("models")
    example = 'add a [[models]] table with name = "gemma3-270m" and path = "default"'
    if models_data is None:
        raise top.error("models", "no model is configured", example)
    if not isinstance(models_data, list) or not all(isinstance(m, dict) for m in models_data):
        raise top.error("models", "expected an array of tables ([[models]])", example)
    if not models_data:
        raise top.error("models", "no model is configured", example)
    top.finish()
    models: list[ModelSettings] = []
    for i, model_data in enumerate(models_data):
        model = _model_settings(_Table(model_data, f"models[{i}]", source), i, base)
        if any(m.name == model.name for m in models):
            raise ConfigError(f"{source}: models[{i}].name: {model.name!r} is already the name "
                              "of an earlier model. Fix: give every model its own name (it "
                              "is what clients put in the request's `model` field).")
        models.append(model)
    _check_default_model(server, models, source)
    return LucernaConfig(server=server, models=tuple(models), source=source)


def _check_default_model(server: ServerSettings, models: Sequence[ModelSettings],
                         source: str) -> None:
    names = [m.name for m in models]
    if server.default_model is not None and server.default_model not in names:
        close = difflib.get_close_matches(server.default_model, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"{source}: server.default_model: {server.default_model!r} is not "
                          f"a configured model. Fix: {hint}name one of {', '.join(names)}.")


def _server_settings(table: _Table, base: Path) -> ServerSettings:
    defaults = ServerSettings()
    host = table.string("host", 'write an address such as "127.0.0.1" (loopback) or '
                                '"0.0.0.0" (every interface; set an api_key then)')
    port = table.integer("port", 0, "use a TCP port such as 8080", high=65535)
    api_key = table.string("api_key", 'write the key as a string, or use api_key_file')
    key_file = table.string("api_key_file", "write the path of a file holding one key per line")
    if api_key is not None and key_file is not None:
        raise table.error("api_key", "api_key and api_key_file are both set",
                          "keep only one of them")
    if api_key is not None and api_key != api_key.strip():
        raise table.error("api_key", "has leading or trailing whitespace",
                          "remove it; clients would have to send it too")
    keys: tuple[str, ...] = (api_key,) if api_key else ()
    if key_file is not None:
        keys = read_api_key_file(base / Path(key_file).expanduser(),
                                 lambda problem, fix: table.error("api_key_file", problem, fix))
    origins = table.strings("cors_origins", 'list origins such as ["http://localhost:3000"]')
    for origin in origins or ():
        if origin != "*" and (not origin.startswith(("http://", "https://"))
                              or origin.endswith("/")):
            raise table.error("cors_origins", f"{origin!r} is not an origin",
                              'write scheme://host[:port] without a path or trailing slash, '
                              'e.g. "http://localhost:3000", or "*" for any origin')
    shutdown = table.number("shutdown_timeout", 0, "give the drain budget in seconds, e.g. 30")
    body = table.integer("max_body_bytes", 1024,
                         "give the largest request body in bytes, e.g. 33554432 (32 MiB)")
    keepalive = table.number("keepalive_interval", 0,
                             "give seconds between keep-alives of a silent stream, e.g. 15 "
                             "(0: none)")
    cache_ram = table.integer("cache_ram_mib", 0,
                              "give the prefix cache's host RAM in MiB, e.g. 4096 (0: off)")
    cache_dir = table.string("kv_cache_dir", 'give a directory, e.g. "~/.cache/lucerna/kv"')
    cache_dir_mib = table.integer("kv_cache_dir_mib", 0,
                                  "give the disk budget in MiB, e.g. 16384 (0: no limit)")
    default_model = table.string("default_model", "name one of the [[models]]")
    group_memory = table.table("group_memory_mib", "write group_memory_mib = { default = 8192 }")
    if group_memory is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0
            for v in group_memory.values()):
        raise table.error("group_memory_mib", "every value must be a positive integer (MiB)",
                          "write group_memory_mib = { default = 8192 }")
    level = table.string("log_level", f"use one of {', '.join(LOG_LEVELS)}")
    if level is not None and level.upper() not in LOG_LEVELS:
        raise table.error("log_level", f"unknown level {level!r}",
                          f"use one of {', '.join(LOG_LEVELS)}")
    table.finish()
    return ServerSettings(
        host=host or defaults.host,
        port=defaults.port if port is None else port,
        api_keys=keys,
        cors_origins=origins or (),
        shutdown_timeout=defaults.shutdown_timeout if shutdown is None else shutdown,
        max_body_bytes=body or defaults.max_body_bytes,
        keepalive_interval=defaults.keepalive_interval if keepalive is None else keepalive,
        log_level=level.upper() if level else None,
        cache_ram_mib=cache_ram,
        kv_cache_dir=None if cache_dir is None else str(base / Path(cache_dir).expanduser()),
        kv_cache_dir_mib=cache_dir_mib or 0,
        default_model=default_model,
        group_memory_mib=dict(group_memory or {}),
    )


def read_api_key_file(path: Path, error: Callable[[str, str], ConfigError]) -> tuple[str, ...]:
    """The keys in ``path``: one per line; blank lines and ``#`` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                    "point it at a readable UTF-8 file holding one key per line") from None
    keys = tuple(line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise error(f"{path} holds no key", "write one key per line into it")
    return keys


def _model_settings(table: _Table, index: int, base: Path) -> ModelSettings:
    name = table.string("name", 'name the model as clients will, e.g. name = "qwen3-8b"',
                        required=True)
    assert name is not None
    if name != name.strip():
        raise table.error("name", f"{name!r} has leading or trailing whitespace", "remove it")
    table.where = f"models[{index}] ({name})"  # later messages say which model by name
    path = table.string("path", 'give the GGUF file, or "default" for the embedded '
                                'gemma3-270m ("default-chat": SmolLM2-135M-Instruct)',
                        required=True)
    assert path is not None
    if path not in EMBEDDED_MODEL_NAMES:
        resolved = (base / Path(path).expanduser()).resolve()
        if not resolved.is_file():
            raise table.error("path", f"{resolved} is not a file",
                              'point it at a GGUF model file (relative paths are relative to '
                              'the config file), or write "default"')
        path = str(resolved)
    role = table.string("role", f"use a target role: {', '.join(_target_roles())}, or leave "
                                "it out to choose by the model's architecture")
    if role is not None and role not in _target_roles():
        raise table.error("role", f"{role!r} is not a target daemon role",
                          f"use one of {', '.join(_target_roles())}, or leave it out")
    defaults = ModelSettings(name=name, path=path)
    n_ctx = table.integer("n_ctx", 16, "write the context size in tokens, e.g. n_ctx = 4096")
    threads = table.integer("threads", 1, "give a CPU thread count, or leave it out for all")
    gpu = table.integer("n_gpu_layers", -1,
                        "give the layers to offload (-1 or leave out: all that fit the build)")
    chunk = table.integer("chunk", 1, "give the prefill chunk in tokens, e.g. chunk = 512")
    slots = table.integer("slots", 0, "give the number of snapshot slots, e.g. slots = 4")
    draft = table.string("draft", "give a DFlash draft GGUF matched to this model, or leave "
                                  "it out to decode without speculation")
    if draft is not None:
        resolved_draft = (base / Path(draft).expanduser()).resolve()
        if not resolved_draft.is_file():
            raise table.error("draft", f"{resolved_draft} is not a file",
                              "point it at a DFlash draft GGUF (relative paths are relative "
                              "to the config file), or leave draft out")
        draft = str(resolved_draft)
    block = table.integer("draft_block_size", 2, "give the tokens per verify step, e.g. 16, "
                          "or leave it out for the draft's own block size", high=64)
    if block is not None and draft is None:
        raise table.error("draft_block_size", "is set without a draft",
                          "add draft = \"<draft.gguf>\", or remove draft_block_size")
    extra = table.strings("extra_args", 'list extra daemon flags, e.g. ["--seed=1"]')
    for arg in extra or ():
        if arg.split("=", 1)[0] in ("--draft-oracle", "--oracle-accept"):
            raise table.error("extra_args", f"{arg!r} is the daemon's benchmark-only oracle "
                              "proposer, which a served model never uses",
                              "remove it; benchmarks run the daemon directly "
                              "(bin/gpu-dflash-bench)")
    launcher = table.strings("launcher", 'list the command to prefix, e.g. ["ssh", "gpu-host"]')
    env = table.table("env", 'write env = { NAME = "value" }')
    if env is not None and not all(isinstance(v, str) for v in env.values()):
        raise table.error("env", "every value must be a string", 'quote the values: '
                          'env = { CUDA_VISIBLE_DEVICES = "0" }')
    queue = table.integer("queue_limit", 0, "give how many requests may wait, e.g. 16")
    max_out = table.integer("max_output_tokens", 1,
                            "give a per-request cap in tokens, or leave it out for a quarter "
                            "of the context")
    load = table.string("load", 'write load = "boot" or load = "on_demand"')
    if load is not None and load not in LOAD_MODES:
        raise table.error("load", f"unknown mode {load!r}",
                          'write load = "boot" (start with the server) or "on_demand"')
    idle_text = table.get("idle")
    idle_s = None if idle_text is None else parse_duration(
        idle_text, lambda problem: table.error("idle", problem,
                                               'write a duration such as "90s", "10m" or "1h"'))
    idle_action = table.string("idle_action", 'write idle_action = "park" or "stop"')
    if idle_action is not None and idle_action not in IDLE_ACTIONS:
        raise table.error("idle_action", f"unknown action {idle_action!r}",
                          'write "park" (release memory, keep the process and its caches) '
                          'or "stop" (end the daemon)')
    group = table.string("group", 'name the group of models that share a device, e.g. "gpu0"')
    template_file = table.string("chat_template_file", "give a Jinja chat template file")
    if template_file is not None:
        resolved_template = (base / Path(template_file).expanduser()).resolve()
        if not resolved_template.is_file():
            raise table.error("chat_template_file", f"{resolved_template} is not a file",
                              "point it at a Jinja template (relative paths are relative to "
                              "the config file), or leave it out for the GGUF's")
        template_file = str(resolved_template)
    effort = table.string("reasoning_effort", f"use one of {', '.join(EFFORT_BUDGETS)}")
    if effort is not None and effort not in EFFORT_BUDGETS:
        raise table.error("reasoning_effort", f"unknown effort {effort!r}",
                          f"use one of {', '.join(EFFORT_BUDGETS)}")
    reasoning_budget = table.integer("reasoning_budget", 0,
                                     "give the reasoning tokens allowed, e.g. 1024 (0: none)")
    embeddings = table.string("embeddings", 'write embeddings = "mean" or "last"')
    if embeddings is not None and embeddings not in EMBEDDING_POOLING:
        raise table.error("embeddings", f"unknown pooling {embeddings!r}",
                          'write "mean" (the mean of the hidden states) or "last" (the last '
                          "token's), or leave it out to serve no embeddings")
    restart_data = table.table("restart", "write restart = { max_failures = 5 }")
    restart = _restart_policy(_Table(restart_data or {}, f"{table.where}.restart",
                                     table.source))
    prefill_data = table.table("prefill", 'write [models.prefill] with drafter = "default"')
    prefill = None if prefill_data is None else parse_prefill_table(
        _Table(prefill_data, f"{table.where}.prefill", table.source), base)
    table.finish()
    return replace(
        defaults,
        role=role,
        n_ctx=defaults.n_ctx if n_ctx is None else n_ctx,
        threads=threads,
        n_gpu_layers=gpu,
        chunk=chunk,
        slots=slots,
        draft=draft,
        draft_block_size=block,
        extra_args=extra or (),
        launcher=launcher or (),
        env=dict(env or {}),
        queue_limit=defaults.queue_limit if queue is None else queue,
        max_output_tokens=max_out,
        restart=restart,
        prefill=prefill,
        load=load or defaults.load,
        idle_s=idle_s,
        idle_action=idle_action or defaults.idle_action,
        group=group or defaults.group,
        chat_template_file=template_file,
        reasoning_effort=effort,
        reasoning_budget=reasoning_budget,
        embeddings=embeddings,
    )


LOAD_MODES = ("boot", "on_demand")
EMBEDDING_POOLING = ("mean", "last")
IDLE_ACTIONS = ("park", "stop")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object, error: Callable[[str], ConfigError]) -> float:
    """Seconds from ``"90s"``, ``"10m"``, ``"1h"``, ``"250ms"`` or a plain number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        unit = next((u for u in ("ms", "s", "m", "h") if text.endswith(u)), "")
        try:
            seconds = float(text[:len(text) - len(unit)]) * _DURATION_UNITS.get(unit, 1.0)
        except ValueError:
            raise error(f"{value!r} is not a duration") from None
    else:
        raise error(f"expected a duration, got {value!r}")
    if not seconds > 0:
        raise error(f"{value!r} is not a positive duration")
    return seconds


def _restart_policy(table: _Table) -> RestartPolicy:
    defaults = RestartPolicy()
    failures = table.integer("max_failures", 1,
                             "give the failures in a row after which the server exits, e.g. 5")
    first = table.number("first_delay_s", 0, "give seconds, e.g. 0 (restart at once)")
    base = table.number("base_delay_s", 0, "give seconds, e.g. 0.5")
    cap = table.number("max_delay_s", 0, "give seconds, e.g. 30")
    healthy = table.number("healthy_after_s", 0, "give seconds, e.g. 60")
    table.finish()
    policy = RestartPolicy(
        first_delay_s=defaults.first_delay_s if first is None else first,
        base_delay_s=defaults.base_delay_s if base is None else base,
        max_delay_s=defaults.max_delay_s if cap is None else cap,
        max_failures=failures or defaults.max_failures,
        healthy_after_s=defaults.healthy_after_s if healthy is None else healthy,
    )
    if policy.max_delay_s < policy.base_delay_s:
        raise table.error("max_delay_s", f"{policy.max_delay_s:g} is below base_delay_s "
                          f"{policy.base_delay_s:g}", "make max_delay_s >= base_delay_s")
    return policy


def _target_roles() -> list[str]:
    return sorted(name for name, spec in ROLES.items() if spec.is_target)


# --- from settings to served models ------------------------------------------------------


def build_models(config: LucernaConfig, native: NativeBuild,
                 progress: Callable[[str], None] = lambda message: None) -> list[ServedModel]:
    """Resolve each model's file, read its GGUF header, pick its daemon: ``ServedModel``s.

    The embedded default model is assembled on first use (``progress`` reports it).
    """
    from daemons.default_model import ensure_chat_model, ensure_default_model
    from daemons.gguf_info import read_gguf_info
    from orchestrator.models import ServedModel
    from orchestrator.prefill import build_compressor, is_proxy, served_path
    from orchestrator.residency import Residence

    def gguf(setting: str, at: str) -> tuple[Path, GGUFInfo]:
        path = (ensure_default_model(progress) if setting == DEFAULT_MODEL_PATH
                else ensure_chat_model(progress) if setting == CHAT_MODEL_PATH
                else Path(setting))
        try:
            return path, read_gguf_info(path)
        except (DaemonsError, OSError, ValueError) as exc:
            raise ConfigError(f"{at}: {path} is not a readable GGUF file: {exc}. "
                              "Fix: point it at a GGUF model file.") from None

    served: list[ServedModel] = []
    cache = _cache_settings(config.server, len(config.models))
    for i, settings in enumerate(config.models):
        where = f"{config.source}: models[{i}] ({settings.name})"
        # PFlash proxy mode (orchestrator/prefill) runs no target: the model's own
        # daemon is the drafter, a pflash daemon.
        proxy = is_proxy(settings.prefill)
        path, info = gguf(served_path(settings.path, settings.prefill), f"{where}.path")
        if settings.chat_template_file is not None:
            info = replace(info, chat_template=Path(settings.chat_template_file).read_text())
        role = (_drafter_role(info.architecture, f"{where}.path") if proxy
                else _role_for(settings, info.architecture, where))
        drafter_path = None
        if settings.prefill is not None and not proxy and settings.prefill.mode != "off":
            drafter_path, drafter_info = gguf(settings.prefill.drafter or DEFAULT_MODEL_PATH,
                                              f"{where}.prefill.drafter")
            _drafter_role(drafter_info.architecture, f"{where}.prefill.drafter")
        draft = None
        if settings.draft is not None:
            draft, draft_info = gguf(settings.draft, f"{where}.draft")
            _check_draft(role, draft_info.architecture, f"{where}.draft")
        launch = DaemonLaunch(
            role=role, executable=native.binary(role.name), model=path,
            n_ctx=settings.n_ctx, threads=settings.threads,
            n_gpu_layers=settings.n_gpu_layers, chunk=settings.chunk, slots=settings.slots,
            draft=draft, draft_block_size=settings.draft_block_size,
            extra_args=settings.extra_args, launcher=settings.launcher, env=dict(settings.env),
        )
        served.append(ServedModel(
            name=settings.name, info=info, launch=launch, queue_limit=settings.queue_limit,
            max_output_tokens=settings.max_output_tokens, restart_policy=settings.restart,
            prefill=build_compressor(settings.name, settings.prefill, launch,
                                     drafter_path=drafter_path,
                                     pflash_executable=native.binary("pflash"),
                                     restart=settings.restart),
            prefix_cache=PrefixCache(settings.name, cache, launch.slots or DEFAULT_SLOTS),
            residence=Residence(load=settings.load, idle_s=settings.idle_s,
                                idle_action=settings.idle_action, group=settings.group),
            reasoning=_reasoning_default(settings),
            embeddings=settings.embeddings,
        ))
    return served


def _reasoning_default(settings: ModelSettings) -> ReasoningControl:
    control = (ReasoningControl() if settings.reasoning_effort is None
               else ReasoningControl.from_effort(settings.reasoning_effort))
    if settings.reasoning_budget is not None:
        control = ReasoningControl(settings.reasoning_budget > 0, settings.reasoning_budget)
    return control


def _cache_settings(server: ServerSettings, n_models: int) -> CacheSettings:
    """Each model's share of the prefix cache's budgets."""
    ram = (default_ram_bytes() if server.cache_ram_mib is None
           else server.cache_ram_mib << 20) // max(1, n_models)
    return CacheSettings(
        ram_bytes=ram,
        disk_dir=None if server.kv_cache_dir is None else Path(server.kv_cache_dir),
        disk_bytes=(server.kv_cache_dir_mib << 20) // max(1, n_models))


def _check_draft(role: RoleSpec, architecture: str, where: str) -> None:
    if architecture != "dflash":
        raise ConfigError(f"{where}: a draft must be a DFlash draft GGUF (architecture "
                          f"'dflash'), this one is {architecture!r}. Fix: point draft at the "
                          "DFlash draft made for this model, or leave draft out.")
    if role.name != "qwen35":
        raise ConfigError(f"{where}: speculative decoding is served by the qwen35 daemon; "
                          f"this model runs on {role.name}. Fix: leave draft out.")


def _drafter_role(architecture: str, where: str) -> RoleSpec:
    role = ROLES["pflash"]
    if architecture not in role.architectures:
        raise ConfigError(
            f"{where}: a PFlash drafter must be a GGUF of architecture "
            f"{', '.join(sorted(role.architectures))}, this one is {architecture!r}. Fix: use "
            'a small model of one of those (e.g. Qwen3-0.6B), or "default".')
    return role


def _role_for(settings: ModelSettings, architecture: str, where: str) -> RoleSpec:
    if settings.role is None:
        try:
            return target_role_for(architecture)
        except DaemonsError as exc:
            raise ConfigError(f"{where}.path: {exc}. Fix: serve a model of a supported "
                              "architecture.") from None
    role = ROLES[settings.role]
    if architecture not in role.architectures:
        raise ConfigError(
            f"{where}.role: the {role.name} daemon does not serve GGUF architecture "
            f"{architecture!r} (it serves {', '.join(sorted(role.architectures))}). Fix: leave "
            "role out to choose by architecture, or serve a matching model.")
    return role


@dataclass(frozen=True)
class Overrides:
    """``lucerna serve`` flags that were given; None means "not on the command line"."""

    host: str | None = None
    port: int | None = None
    api_keys: tuple[str, ...] | None = None
    shutdown_timeout: float | None = None
    max_body_bytes: int | None = None
    keepalive_interval: float | None = None
    model: str | None = None
    model_name: str | None = None
    n_ctx: int | None = None
    threads: int | None = None
    n_gpu_layers: int | None = None
    queue_limit: int | None = None
    max_output_tokens: int | None = None
    restart_max_failures: int | None = None
    draft: str | None = None
    """``--draft``: a DFlash draft GGUF for every model served."""
    cache_ram_mib: int | None = None
    kv_cache_dir: str | None = None
    kv_cache_dir_mib: int | None = None
    prefill: PrefillOverrides = field(default_factory=PrefillOverrides)
    """The ``--prefill-*`` flags (PFlash); they apply to every model served."""
    embeddings: str | None = None
    """``--embeddings``: the pooling with which every model served answers embeddings."""


def apply_overrides(config: LucernaConfig | None, flags: Overrides) -> LucernaConfig:
    """The config that ``lucerna serve`` runs: the file's (if any), flags on top.

    - Without a file: one model, ``--model`` (default: the embedded gemma3-270m),
      named ``--model-name`` (default: ``gemma3-270m`` or the file's stem).
    - With a file, ``--model PATH`` names a model ``--model-name`` (default: the
      file's stem): a configured model of that name gets PATH as its path and keeps
      its other settings; otherwise the model is added after the configured ones.
    - Per-model flags (``--n-ctx``, ``--threads``, ...) set that value for every
      model served; server flags replace their ``[server]`` key.
    """
    _check_flags(flags)
    if config is None:
        config = LucernaConfig(server=ServerSettings(), models=(), source="command line")
        if flags.model is None and flags.model_name is not None:
            flags = replace(flags, model=DEFAULT_MODEL_PATH)
        elif flags.model is None:  # both embedded models; the chat model answers by default
            config = replace(config, server=replace(config.server,
                                                    default_model=CHAT_MODEL_NAME),
                             models=tuple(ModelSettings(name=name, path=path)
                                          for path, name in EMBEDDED_MODEL_NAMES.items()))
    elif flags.model_name is not None and flags.model is None:
        raise ConfigError(f"--model-name {flags.model_name!r} was given with --config "
                          f"{config.source} but without --model. Fix: add --model PATH (it "
                          "adds or replaces that model), or rename the model in the file.")
    models = list(config.models)
    if flags.model is not None:
        path = flags.model
        if path not in EMBEDDED_MODEL_NAMES:
            resolved = Path(path).expanduser().resolve()
            if not resolved.is_file():
                raise ConfigError(f"--model: {resolved} is not a file. Fix: give a GGUF model "
                                  'file, or "default" for the embedded gemma3-270m.')
            path = str(resolved)
        name = flags.model_name or model_name_for(path)
        same = [i for i, m in enumerate(models) if m.name == name]
        if same:
            models[same[0]] = replace(models[same[0]], path=path)
        else:
            models.append(ModelSettings(name=name, path=path))
    per_model: dict[str, Any] = {key: value for key, value in (
        ("n_ctx", flags.n_ctx), ("threads", flags.threads), ("n_gpu_layers", flags.n_gpu_layers),
        ("queue_limit", flags.queue_limit), ("max_output_tokens", flags.max_output_tokens),
        ("embeddings", flags.embeddings),
    ) if value is not None}
    if flags.draft is not None:
        draft = Path(flags.draft).expanduser().resolve()
        if not draft.is_file():
            raise ConfigError(f"--draft: {draft} is not a file. Fix: give a DFlash draft GGUF "
                              "matched to the model, or leave --draft out.")
        per_model["draft"] = str(draft)
    models = [replace(m, **per_model) for m in models]
    if flags.restart_max_failures is not None:
        models = [replace(m, restart=replace(m.restart, max_failures=flags.restart_max_failures))
                  for m in models]
    if flags.prefill.given():
        models = [replace(m, prefill=flags.prefill.apply(m.prefill)) for m in models]
    server = config.server
    server_flags: dict[str, Any] = {key: value for key, value in (
        ("host", flags.host), ("port", flags.port), ("api_keys", flags.api_keys),
        ("shutdown_timeout", flags.shutdown_timeout), ("max_body_bytes", flags.max_body_bytes),
        ("keepalive_interval", flags.keepalive_interval), ("cache_ram_mib", flags.cache_ram_mib),
        ("kv_cache_dir", None if flags.kv_cache_dir is None
         else str(Path(flags.kv_cache_dir).expanduser().resolve())),
        ("kv_cache_dir_mib", flags.kv_cache_dir_mib),
    ) if value is not None}
    return replace(config, server=replace(server, **server_flags), models=tuple(models))


def _check_flags(flags: Overrides) -> None:
    for flag, value, low in (
        ("--port", flags.port, 0), ("--shutdown-timeout", flags.shutdown_timeout, 0),
        ("--keepalive-interval", flags.keepalive_interval, 0),
        ("--max-body-bytes", flags.max_body_bytes, 1024), ("--n-ctx", flags.n_ctx, 16),
        ("--threads", flags.threads, 1), ("--n-gpu-layers", flags.n_gpu_layers, -1),
        ("--queue-limit", flags.queue_limit, 0),
        ("--max-output-tokens", flags.max_output_tokens, 1),
        ("--restart-max-failures", flags.restart_max_failures, 1),
        ("--cache-ram", flags.cache_ram_mib, 0), ("--kv-cache-dir-mib", flags.kv_cache_dir_mib, 0),
    ):
        if value is not None and value < low:
            raise ConfigError(f"{flag}: {value:g} is below its minimum {low}. Fix: give "
                              f"{flag} a value >= {low}, or leave it out for the default.")
    if flags.port is not None and flags.port > 65535:
        raise ConfigError(f"--port: {flags.port} is not a TCP port. Fix: use 1..65535.")


def model_name_for(path: str) -> str:
    """The default client-facing name of a model file: the default's name, or the stem."""
    return EMBEDDED_MODEL_NAMES.get(path) or Path(path).stem
