"""``lucerna serve``'s flags: declared from the config keys, then laid over the file.

Every flag that sets a config key is that key's declaration (``_keys``) added with
``add_flag``; its bounds are checked by ``check_flag`` and its help shows the declared
default. ``Overrides`` holds what was given; ``apply_overrides`` lays it over the file.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from daemons.default_model import CHAT_MODEL_NAME
from orchestrator.config._keys import DEFAULT_MODEL_PATH, ModelKeys, RestartKeys, ServerKeys
from orchestrator.config._schema import (
    EMBEDDED_MODEL_NAMES,
    LucernaConfig,
    ModelSettings,
    ServerSettings,
)
from orchestrator.errors import ConfigError
from orchestrator.prefill import PrefillOverrides
from orchestrator.settings import Setting, add_flag, check_flag, flag_file

__all__ = ["Overrides", "add_serve_arguments", "apply_overrides", "model_name_for"]

SERVER_FLAGS = (ServerKeys.HOST, ServerKeys.PORT, ServerKeys.SHUTDOWN_TIMEOUT,
                ServerKeys.MAX_BODY_BYTES, ServerKeys.KEEPALIVE_INTERVAL,
                ServerKeys.CACHE_RAM_MIB, ServerKeys.KV_CACHE_DIR, ServerKeys.KV_CACHE_DIR_MIB)
"""Flags that replace their ``[server]`` key."""
MODEL_FLAGS = (ModelKeys.N_CTX, ModelKeys.THREADS, ModelKeys.N_GPU_LAYERS,
               ModelKeys.QUEUE_LIMIT, ModelKeys.PARALLEL, ModelKeys.SPARE_SEQUENCES,
               ModelKeys.MAX_OUTPUT_TOKENS,
               ModelKeys.EMBEDDINGS, ModelKeys.LOOKUP, ModelKeys.DRAFT_TREE,
               ModelKeys.DETERMINISTIC)
"""Flags that set their ``[[models]]`` key for every model served."""
BOUNDED_FLAGS = tuple(s for s in (*SERVER_FLAGS, *MODEL_FLAGS, RestartKeys.MAX_FAILURES)
                      if s.low is not None)


def _dest(setting: Setting) -> str:
    return setting.dest or setting.key


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
    parallel: int | None = None
    spare_sequences: int | None = None
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
    deterministic: bool | None = None
    """``--deterministic``: batch-invariant decoding for every model served."""
    lookup: str | None = None
    """``--lookup``: prompt lookup (off, opt-in, on) for every model served."""
    draft_tree: int | None = None
    """``--draft-tree``: tree verify's budget for every model served (0: chain)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, api_keys: tuple[str, ...] | None,
                  prefill: PrefillOverrides) -> Overrides:
        """The flags ``add_serve_arguments`` added, as parsed (each under its field's name)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls)
                 if f.name not in ("api_keys", "prefill")}
        return cls(**given, api_keys=api_keys, prefill=prefill)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``Overrides``; every default is None (see ``apply_overrides``)."""
    for setting in (ModelKeys.PATH, ModelKeys.NAME, ServerKeys.HOST, ServerKeys.PORT,
                    ServerKeys.API_KEY_FILE, ServerKeys.MAX_BODY_BYTES,
                    ServerKeys.KEEPALIVE_INTERVAL,
                    ModelKeys.N_CTX, ModelKeys.THREADS, ModelKeys.N_GPU_LAYERS,
                    ModelKeys.MAX_OUTPUT_TOKENS, ServerKeys.SHUTDOWN_TIMEOUT,
                    ModelKeys.QUEUE_LIMIT, ModelKeys.PARALLEL, ModelKeys.SPARE_SEQUENCES,
                    RestartKeys.MAX_FAILURES,
                    ModelKeys.DRAFT, ModelKeys.LOOKUP, ModelKeys.DRAFT_TREE):
        add_flag(parser, setting)
    add_flag(parser, ModelKeys.EMBEDDINGS, nargs="?", const="mean")
    add_flag(parser, ModelKeys.DETERMINISTIC, action="store_true")
    for setting in (ServerKeys.CACHE_RAM_MIB, ServerKeys.KV_CACHE_DIR,
                    ServerKeys.KV_CACHE_DIR_MIB):
        add_flag(parser, setting)


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
    for setting in BOUNDED_FLAGS:
        check_flag(setting, getattr(flags, _dest(setting)))
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
        path = flag_file(ModelKeys.PATH, flags.model, EMBEDDED_MODEL_NAMES)
        name = flags.model_name or model_name_for(path)
        same = [i for i, m in enumerate(models) if m.name == name]
        if same:
            models[same[0]] = replace(models[same[0]], path=path)
        else:
            models.append(ModelSettings(name=name, path=path))
    per_model: dict[str, Any] = {s.key: getattr(flags, _dest(s)) for s in MODEL_FLAGS
                                 if getattr(flags, _dest(s)) is not None}
    if flags.draft is not None:
        per_model["draft"] = flag_file(ModelKeys.DRAFT, flags.draft)
    models = [replace(m, **per_model) for m in models]
    if flags.restart_max_failures is not None:
        models = [replace(m, restart=replace(m.restart, max_failures=flags.restart_max_failures))
                  for m in models]
    if flags.prefill.given():
        models = [replace(m, prefill=flags.prefill.apply(m.prefill)) for m in models]
    server_flags: dict[str, Any] = {s.key: getattr(flags, _dest(s)) for s in SERVER_FLAGS
                                    if getattr(flags, _dest(s)) is not None}
    if flags.api_keys is not None:
        server_flags["api_keys"] = flags.api_keys
    if flags.kv_cache_dir is not None:
        server_flags["kv_cache_dir"] = str(Path(flags.kv_cache_dir).expanduser().resolve())
    return replace(config, server=replace(config.server, **server_flags), models=tuple(models))


def model_name_for(path: str) -> str:
    """The default client-facing name of a model file: the default's name, or the stem."""
    return EMBEDDED_MODEL_NAMES.get(path) or Path(path).stem
