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

from orchestrator.config._keys import LOG_LEVELS, TARGET_ROLES, ModelKeys, RestartKeys, ServerKeys
from orchestrator.config._schema import (
    EMBEDDED_MODEL_NAMES,
    LucernaConfig,
    ModelSettings,
    ServerSettings,
)
from orchestrator.errors import ConfigError
from orchestrator.prefill import parse_prefill_table
from orchestrator.settings import SettingsTable
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
    return LucernaConfig(server=server, models=tuple(models), source=source)


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
    if block is not None and draft is None:
        raise table.error("draft_block_size", "is set without a draft",
                          "add draft = \"<draft.gguf>\", or remove draft_block_size")
    deterministic = table.read(keys.DETERMINISTIC)
    extra = table.read(keys.EXTRA_ARGS)
    for arg in extra or ():
        if arg.split("=", 1)[0] in ("--draft-oracle", "--oracle-accept"):
            raise table.error("extra_args", f"{arg!r} is the daemon's benchmark-only oracle "
                              "proposer, which a served model never uses",
                              "remove it; benchmarks run the daemon directly "
                              "(bin/gpu-dflash-bench)")
    launcher = table.read(keys.LAUNCHER)
    env = table.read(keys.ENV)
    if env is not None and not all(isinstance(v, str) for v in env.values()):
        raise table.error("env", "every value must be a string", 'quote the values: '
                          'env = { CUDA_VISIBLE_DEVICES = "0" }')
    queue = table.read(keys.QUEUE_LIMIT)
    parallel = table.read(keys.PARALLEL)
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
        extra_args=extra or (),
        launcher=launcher or (),
        env=dict(env or {}),
        queue_limit=queue,
        parallel=parallel,
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
