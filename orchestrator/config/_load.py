"""Reading and validating the config file: ``load_config`` and ``parse_config``.

Each key is read through its declaration (``_keys``), which holds its type, bounds,
choices, default and fix; what is left here is what a declaration cannot say: keys
that depend on each other, paths resolved against the file's directory, durations.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config._keys import (
    LOG_LEVELS,
    TARGET_ROLES,
    HostKeys,
    ModelKeys,
    RestartKeys,
    ServerKeys,
    ShardKeys,
)
from orchestrator.config._schema import (
    EMBEDDED_MODEL_NAMES,
    HostSettings,
    LucernaConfig,
    ModelSettings,
    ServerSettings,
    ShardSettings,
)
from orchestrator.errors import ConfigError
from orchestrator.prefill import parse_prefill_table
from orchestrator.settings import Setting, SettingsTable
from orchestrator.supervisor import RestartPolicy

__all__ = ["load_config", "parse_config", "parse_duration", "read_api_key_file"]


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
    top = SettingsTable(data, "", source)
    server_data = top.table("server", "write [server] as a table of settings")
    server = _server_settings(SettingsTable(server_data or {}, "server", source), base)
    hosts = _hosts(top, source)
    shards = _shards(top, source, base)
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
        model = _model_settings(SettingsTable(model_data, f"models[{i}]", source), i, base)
        if any(m.name == model.name for m in models):
            raise ConfigError(f"{source}: models[{i}].name: {model.name!r} is already the name "
                              "of an earlier model. Fix: give every model its own name (it "
                              "is what clients put in the request's `model` field).")
        models.append(model)
    _check_default_model(server, models, source)
    _check_model_hosts(hosts, models, source)
    _check_shards(hosts, shards, models, source)
    return LucernaConfig(server=server, models=tuple(models), hosts=hosts, shards=shards,
                         source=source)


def _shards(top: SettingsTable, source: str, base: Path) -> tuple[ShardSettings, ...]:
    data = top.get("shards")
    if data is None:
        return ()
    example = ('add [[shards]] tables with name = "experts", path = "ds4.gguf" and '
               'listen = "10.0.0.2:50052"')
    if not isinstance(data, list) or not all(isinstance(h, dict) for h in data):
        raise top.error("shards", "expected an array of tables ([[shards]])", example)
    shards: list[ShardSettings] = []
    for i, shard_data in enumerate(data):
        table = SettingsTable(shard_data, f"shards[{i}]", source)
        keys = ShardKeys
        name = table.read(keys.NAME, required=True)
        table.where = f"shards[{i}] ({name})"
        path = table.file(keys.PATH, base, required=True)
        listen = table.read(keys.LISTEN, required=True)
        address, _, port = listen.rpartition(":")
        if not address or not port.isdigit() or not 0 < int(port) < 65536:
            raise table.error("listen", f"{listen!r} is not HOST:PORT", keys.LISTEN.fix)
        shard = ShardSettings(name=name, path=path or "", listen=listen,
                              host=table.read(keys.HOST), threads=table.read(keys.THREADS),
                              extra_args=tuple(table.read(keys.EXTRA_ARGS) or ()))
        table.finish()
        if any(s.name == shard.name for s in shards):
            raise ConfigError(f"{source}: shards[{i}].name: {name!r} is already the name of "
                              "an earlier shard. Fix: give every shard its own name.")
        shards.append(shard)
    return tuple(shards)


def _check_shards(hosts: Sequence[HostSettings], shards: Sequence[ShardSettings],
                  models: Sequence[ModelSettings], source: str) -> None:
    host_names = [h.name for h in hosts]
    for i, shard in enumerate(shards):
        if shard.host is not None and shard.host not in host_names:
            raise ConfigError(f"{source}: shards[{i}] ({shard.name}).host: {shard.host!r} is "
                              "not a configured host. Fix: add a [[hosts]] table named so, or "
                              "leave host out.")
    names = [s.name for s in shards]
    for i, model in enumerate(models):
        for name in model.shards:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(f"{source}: models[{i}] ({model.name}).shards: {name!r} is "
                                  f"not a configured shard. Fix: {hint}add a [[shards]] table "
                                  "named so.")


def _hosts(top: SettingsTable, source: str) -> tuple[HostSettings, ...]:
    data = top.get("hosts")
    if data is None:
        return ()
    example = 'add [[hosts]] tables with name = "gpu2" and launcher = ["ssh", "gpu2"]'
    if not isinstance(data, list) or not all(isinstance(h, dict) for h in data):
        raise top.error("hosts", "expected an array of tables ([[hosts]])", example)
    hosts: list[HostSettings] = []
    for i, host_data in enumerate(data):
        host = _host_settings(SettingsTable(host_data, f"hosts[{i}]", source))
        if any(h.name == host.name for h in hosts):
            raise ConfigError(f"{source}: hosts[{i}].name: {host.name!r} is already the name "
                              "of an earlier host. Fix: give every host its own name.")
        hosts.append(host)
    return tuple(hosts)


def _host_settings(table: SettingsTable) -> HostSettings:
    keys = HostKeys
    name = table.read(keys.NAME, required=True)
    table.where = f"{table.where} ({name})"
    launcher = table.read(keys.LAUNCHER, required=True)
    if not launcher:
        raise table.error("launcher", "is empty", keys.LAUNCHER.fix)
    for key in (keys.DAEMON_DIR, keys.CHECKOUT, keys.MODEL_DIR, keys.SCRATCH_DIR):
        value = table.read(key)
        if value is not None and not value.startswith("/"):
            raise table.error(key.key, f"{value!r} is not an absolute path", key.fix)

    def duration(setting: Setting) -> float:
        value = table.get(setting.key)
        return parse_duration(setting.default if value is None else value,
                              lambda problem: table.error(setting.key, problem, setting.fix))

    link_timeout = duration(keys.LINK_TIMEOUT)
    keepalive = duration(keys.KEEPALIVE)
    if keepalive * 2 > link_timeout:
        raise table.error("link_timeout", f"{link_timeout:g} s is less than two keep-alive "
                          f"intervals ({keepalive:g} s each)", "make link_timeout at least "
                          "twice keepalive, e.g. keepalive = \"1s\", link_timeout = \"5s\"")
    host = HostSettings(
        name=name, launcher=tuple(launcher), backend=table.read(keys.BACKEND),
        daemon_dir=table.read(keys.DAEMON_DIR), checkout=table.read(keys.CHECKOUT),
        model_dir=table.read(keys.MODEL_DIR), scratch_dir=table.read(keys.SCRATCH_DIR),
        remote_shell=table.read(keys.REMOTE_SHELL), link_timeout_s=link_timeout,
        keepalive_s=keepalive)
    table.finish()
    return host


def _check_model_hosts(hosts: Sequence[HostSettings], models: Sequence[ModelSettings],
                       source: str) -> None:
    names = [h.name for h in hosts]
    for i, model in enumerate(models):
        where = f"{source}: models[{i}] ({model.name}).host"
        if model.host is None:
            continue
        if model.host not in names:
            close = difflib.get_close_matches(model.host, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"{where}: {model.host!r} is not a configured host. Fix: "
                              f"{hint}add a [[hosts]] table named so"
                              + (f", or name one of {', '.join(names)}." if names else "."))
        if model.launcher:
            raise ConfigError(f"{where}: the model has both host and launcher. Fix: keep "
                              "host; its [[hosts]] entry holds the launcher.")
        if model.prefill is not None and model.prefill.mode != "off":
            raise ConfigError(f"{where}: [models.prefill] on another host is not supported "
                              "yet (its drafter would run here). Fix: leave host out, or "
                              "remove [models.prefill].")


def _check_default_model(server: ServerSettings, models: Sequence[ModelSettings],
                         source: str) -> None:
    names = [m.name for m in models]
    if server.default_model is not None and server.default_model not in names:
        close = difflib.get_close_matches(server.default_model, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"{source}: server.default_model: {server.default_model!r} is not "
                          f"a configured model. Fix: {hint}name one of {', '.join(names)}.")


def _server_settings(table: SettingsTable, base: Path) -> ServerSettings:
    keys = ServerKeys
    host = table.read(keys.HOST)
    port = table.read(keys.PORT)
    api_key = table.read(keys.API_KEY)
    key_file = table.read(keys.API_KEY_FILE)
    if api_key is not None and key_file is not None:
        raise table.error("api_key", "api_key and api_key_file are both set",
                          "keep only one of them")
    if api_key is not None and api_key != api_key.strip():
        raise table.error("api_key", "has leading or trailing whitespace",
                          "remove it; clients would have to send it too")
    api_keys: tuple[str, ...] = (api_key,) if api_key else ()
    if key_file is not None:
        api_keys = read_api_key_file(
            base / Path(key_file).expanduser(),
            lambda problem, fix: table.error(keys.API_KEY_FILE.key, problem, fix))
    origins = table.read(keys.CORS_ORIGINS)
    for origin in origins or ():
        if origin != "*" and (not origin.startswith(("http://", "https://"))
                              or origin.endswith("/")):
            raise table.error("cors_origins", f"{origin!r} is not an origin",
                              'write scheme://host[:port] without a path or trailing slash, '
                              'e.g. "http://localhost:3000", or "*" for any origin')
    shutdown = table.read(keys.SHUTDOWN_TIMEOUT)
    body = table.read(keys.MAX_BODY_BYTES)
    keepalive = table.read(keys.KEEPALIVE_INTERVAL)
    cache_ram = table.read(keys.CACHE_RAM_MIB)
    cache_dir = table.read(keys.KV_CACHE_DIR)
    cache_dir_mib = table.read(keys.KV_CACHE_DIR_MIB)
    default_model = table.read(keys.DEFAULT_MODEL)
    group_memory = table.read(keys.GROUP_MEMORY_MIB)
    if group_memory is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0
            for v in group_memory.values()):
        raise table.error("group_memory_mib", "every value must be a positive integer (MiB)",
                          keys.GROUP_MEMORY_MIB.fix)
    level = table.read(keys.LOG_LEVEL)
    if level is not None and level.upper() not in LOG_LEVELS:  # any case: "debug" is DEBUG
        raise table.error("log_level", f"unknown level {level!r}", keys.LOG_LEVEL.fix)
    table.finish()
    return ServerSettings(
        host=host,
        port=port,
        api_keys=api_keys,
        cors_origins=origins or (),
        shutdown_timeout=float(shutdown),
        max_body_bytes=body,
        keepalive_interval=float(keepalive),
        log_level=level.upper() if level else None,
        cache_ram_mib=cache_ram,
        kv_cache_dir=None if cache_dir is None else str(base / Path(cache_dir).expanduser()),
        kv_cache_dir_mib=cache_dir_mib,
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


def _model_settings(table: SettingsTable, index: int, base: Path) -> ModelSettings:
    keys = ModelKeys
    name = table.read(keys.NAME, required=True)
    if name != name.strip():
        raise table.error("name", f"{name!r} has leading or trailing whitespace", "remove it")
    table.where = f"models[{index}] ({name})"  # later messages say which model by name
    path = table.file(keys.PATH, base, EMBEDDED_MODEL_NAMES, required=True)
    assert path is not None
    role = table.read(keys.ROLE)
    if role is not None and role not in TARGET_ROLES:
        raise table.error("role", f"{role!r} is not a target daemon role",
                          f"use one of {', '.join(TARGET_ROLES)}, or leave it out")
    n_ctx = table.read(keys.N_CTX)
    threads = table.read(keys.THREADS)
    gpu = table.read(keys.N_GPU_LAYERS)
    chunk = table.read(keys.CHUNK)
    slots = table.read(keys.SLOTS)
    draft = table.file(keys.DRAFT, base)
    block = table.read(keys.DRAFT_BLOCK_SIZE)
    lookup = table.read(keys.LOOKUP)
    tree = table.read(keys.DRAFT_TREE)
    branches = table.read(keys.DRAFT_TREE_BRANCHES)
    if block is not None and draft is None and lookup == "off":
        raise table.error("draft_block_size", "is set without a draft or lookup",
                          "add draft = \"<draft.gguf>\" or lookup = \"opt-in\", or remove "
                          "draft_block_size")
    deterministic = table.read(keys.DETERMINISTIC)
    extra = table.read(keys.EXTRA_ARGS)
    for arg in extra or ():
        if arg.split("=", 1)[0] in ("--draft-oracle", "--oracle-accept"):
            raise table.error("extra_args", f"{arg!r} is the daemon's benchmark-only oracle "
                              "proposer, which a served model never uses",
                              "remove it; benchmarks run the daemon directly "
                              "(bin/gpu-dflash-bench)")
    launcher = table.read(keys.LAUNCHER)
    host = table.read(keys.HOST)
    shards = table.read(keys.SHARDS)
    overrides = table.read(keys.OVERRIDE_TENSOR)
    for entry in overrides or ():
        pattern, _, device = entry.rpartition("=")
        if not pattern or not device or "," in entry:
            raise table.error("override_tensor", f"{entry!r} is not REGEX=DEVICE",
                              keys.OVERRIDE_TENSOR.fix)
    env = table.read(keys.ENV)
    if env is not None and not all(isinstance(v, str) for v in env.values()):
        raise table.error("env", "every value must be a string", 'quote the values: '
                          'env = { CUDA_VISIBLE_DEVICES = "0" }')
    queue = table.read(keys.QUEUE_LIMIT)
    parallel = table.read(keys.PARALLEL)
    spare = table.read(keys.SPARE_SEQUENCES)
    max_out = table.read(keys.MAX_OUTPUT_TOKENS)
    load = table.read(keys.LOAD)
    idle_text = table.get(keys.IDLE.key)
    idle_s = None if idle_text is None else parse_duration(
        idle_text, lambda problem: table.error(keys.IDLE.key, problem, keys.IDLE.fix))
    idle_action = table.read(keys.IDLE_ACTION)
    group = table.read(keys.GROUP)
    template_file = table.file(keys.CHAT_TEMPLATE_FILE, base)
    effort = table.read(keys.REASONING_EFFORT)
    reasoning_budget = table.read(keys.REASONING_BUDGET)
    embeddings = table.read(keys.EMBEDDINGS)
    restart_data = table.read(keys.RESTART)
    restart = _restart_policy(SettingsTable(restart_data or {}, f"{table.where}.restart",
                                            table.source))
    prefill_data = table.read(keys.PREFILL)
    prefill = None if prefill_data is None else parse_prefill_table(
        SettingsTable(prefill_data, f"{table.where}.prefill", table.source), base)
    table.finish()
    return ModelSettings(
        name=name,
        path=path,
        role=role,
        n_ctx=n_ctx,
        threads=threads,
        n_gpu_layers=gpu,
        chunk=chunk,
        slots=slots,
        draft=draft,
        draft_block_size=block,
        deterministic=deterministic,
        lookup=lookup,
        draft_tree=tree,
        draft_tree_branches=branches,
        extra_args=extra or (),
        launcher=launcher or (),
        env=dict(env or {}),
        shards=tuple(shards or ()),
        override_tensor=tuple(overrides or ()),
        host=host,
        queue_limit=queue,
        parallel=parallel,
        spare_sequences=spare,
        max_output_tokens=max_out,
        restart=restart,
        prefill=prefill,
        load=load,
        idle_s=idle_s,
        idle_action=idle_action,
        group=group,
        chat_template_file=template_file,
        reasoning_effort=effort,
        reasoning_budget=reasoning_budget,
        embeddings=embeddings,
    )


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


def _restart_policy(table: SettingsTable) -> RestartPolicy:
    keys = RestartKeys
    policy = RestartPolicy(
        max_failures=table.read(keys.MAX_FAILURES),
        first_delay_s=float(table.read(keys.FIRST_DELAY_S)),
        base_delay_s=float(table.read(keys.BASE_DELAY_S)),
        max_delay_s=float(table.read(keys.MAX_DELAY_S)),
        healthy_after_s=float(table.read(keys.HEALTHY_AFTER_S)),
    )
    table.finish()
    if policy.max_delay_s < policy.base_delay_s:
        raise table.error("max_delay_s", f"{policy.max_delay_s:g} is below base_delay_s "
                          f"{policy.base_delay_s:g}", "make max_delay_s >= base_delay_s")
    return policy
