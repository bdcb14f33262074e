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
    n_gpu_layers, chunk, slots, draft, draft_block_size, lookup ("off" | "opt-in" | "on"),
    draft_tree, draft_tree_branches, extra_args, launcher, env, queue_limit,
    max_output_tokens, restart = {max_failures, first_delay_s, base_delay_s,
    max_delay_s, healthy_after_s}, load ("boot" | "on_demand"), idle ("10m": park
    or stop it after that long unused), idle_action ("park" | "stop"), group,
    chat_template_file (a Jinja file instead of the GGUF's template), reasoning_effort
    ("none" .. "xhigh") and reasoning_budget (tokens): a thinking model's defaults,
    embeddings ("mean" | "last": serve POST /v1/embeddings with that pooling)

    [models.prefill]              PFlash compression / proxy mode; see
                                  orchestrator/prefill/_settings.py for the keys
    host, shards, override_tensor   (in [[models]]) the [[hosts]] entry that runs the
                                  daemon; the [[shards]] whose devices it adds (RPC0..);
                                  REGEX=DEVICE tensor placements

    [[hosts]]                     a machine reached through a launcher (ssh); its
    name, launcher, backend ("cpu" | "cuda" | "hip": picks its build), checkout,
    daemon_dir, model_dir, scratch_dir, remote_shell, link_timeout, keepalive

    [[shards]]                    a ds4_shard daemon serving its device over ggml RPC
    name, path, host, listen ("HOST:PORT"), threads, extra_args

``draft`` is a DFlash draft GGUF for the model's qwen35 daemon: every generation then
decodes speculatively (PROTOCOL.md 5.9). ``lookup`` is prompt lookup, speculation from
the context itself, for any target: "opt-in" lets a request ask with ``"lookup": true``,
"on" runs it for every request that does not say ``"lookup": false``. ``draft_tree``
(0: chain) verifies the draft's proposals as a best-first tree of at most that many
(DDTree, docs/dflash.md), on at most ``draft_tree_branches`` branches. The daemon's
benchmark-only oracle proposer has no key here on purpose: it is a daemon flag and
nothing an API client can reach.

Relative paths (``path``, ``draft``, ``api_key_file``) are relative to the file's directory.
Reading a model's GGUF header and choosing its daemon happen in ``build_models``,
which needs the native build; its errors are ``ConfigError`` too.

Inside: every key is declared once in ``_keys`` (type, bounds, default, fix, flag);
``_schema`` holds the settings dataclasses, ``_load`` the validator, ``_build`` the
step to served models, ``_overrides`` the ``lucerna serve`` flags.
"""

from __future__ import annotations

from orchestrator.config._build import build_models
from orchestrator.config._keys import (
    CHAT_MODEL_PATH,
    DEFAULT_MODEL_PATH,
    LOG_LEVELS,
    HostKeys,
    ModelKeys,
    RestartKeys,
    ServerKeys,
    ShardKeys,
)
from orchestrator.config._load import load_config, parse_config, parse_duration, read_api_key_file
from orchestrator.config._overrides import (
    Overrides,
    add_serve_arguments,
    apply_overrides,
    model_name_for,
)
from orchestrator.config._schema import (
    EMBEDDED_MODEL_NAMES,
    HostSettings,
    LucernaConfig,
    ModelSettings,
    ServerSettings,
    ShardSettings,
)

__all__ = [
    "CHAT_MODEL_PATH",
    "DEFAULT_MODEL_PATH",
    "EMBEDDED_MODEL_NAMES",
    "LOG_LEVELS",
    "HostKeys",
    "HostSettings",
    "LucernaConfig",
    "ModelKeys",
    "ModelSettings",
    "Overrides",
    "RestartKeys",
    "ServerKeys",
    "ServerSettings",
    "ShardKeys",
    "ShardSettings",
    "add_serve_arguments",
    "apply_overrides",
    "build_models",
    "load_config",
    "model_name_for",
    "parse_config",
    "parse_duration",
    "read_api_key_file",
]
