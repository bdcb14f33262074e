"""From settings to served models: ``build_models`` reads each GGUF and picks its daemon.

This needs the native build; its errors are ``ConfigError`` too, named by the model's
place in the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from daemons.errors import DaemonsError
from daemons.roles import DEFAULT_SLOTS, ROLES, DaemonLaunch, RoleSpec, target_role_for
from orchestrator.config._hosts import host_launch_fields
from orchestrator.config._keys import CHAT_MODEL_PATH, DEFAULT_MODEL_PATH
from orchestrator.config._schema import LucernaConfig, ModelSettings, ServerSettings
from orchestrator.errors import ConfigError
from orchestrator.parallel_default import (
    ParallelChoice,
    backend_free_bytes,
    choose_parallel,
    choose_spare_sequences,
    pool_tokens,
)
from orchestrator.prefix_cache import CacheSettings, PrefixCache, default_ram_bytes
from orchestrator.reasoning import ReasoningControl
from orchestrator.settings import N_CTX
from protocol import MAX_PARALLEL

if TYPE_CHECKING:
    from daemons.gguf_info import GGUFInfo
    from daemons.native import NativeBuild
    from orchestrator.models import ServedModel

__all__ = ["build_models"]


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

    from orchestrator.supervisor import Supervisor

    served: list[ServedModel] = []
    cache = _cache_settings(config.server, len(config.models))
    hosts = {host.name: host for host in config.hosts}
    # One supervised daemon per shard, whichever models use it.
    shards: dict[str, Supervisor] = {}
    for i, shard in enumerate(config.shards):
        where = f"{config.source}: shards[{i}] ({shard.name})"
        shard_path, shard_info = gguf(shard.path, f"{where}.path")
        shard_role = ROLES["ds4_shard"]
        if shard_info.architecture not in shard_role.architectures:
            raise ConfigError(f"{where}.path: a ds4 shard starts with a deepseek4 GGUF, this "
                              f"one is {shard_info.architecture!r}. Fix: point it at the "
                              "deepseek4 model.")
        shard_runs: dict[str, object] = (
            {"executable": native.binary(shard_role.name), "model": shard_path}
            if shard.host is None
            else host_launch_fields(hosts[shard.host], shard_role, shard_path, None))
        shard_launch = DaemonLaunch(role=shard_role, threads=shard.threads,
                                    rpc_listen=shard.listen, extra_args=shard.extra_args,
                                    **shard_runs)  # type: ignore[arg-type]
        shards[shard.name] = Supervisor(f"shard {shard.name}", shard_launch)
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
        _check_tree(settings, where)
        _check_parallel(settings, where)
        choice = _parallel_choice(settings, path, info, proxy, native.backend)
        choice = replace(choice, spare_sequences=_spare_sequences(
            settings, choice, path, info, native.backend, cache.enabled, where))
        parallel = choice.parallel
        where_runs: dict[str, object] = (
            {"executable": native.binary(role.name), "model": path, "draft": draft,
             "launcher": settings.launcher} if settings.host is None
            else host_launch_fields(hosts[settings.host], role, path, draft))
        launch = DaemonLaunch(
            role=role,
            n_ctx=(pool_tokens(settings.n_ctx or N_CTX.default, parallel) if parallel > 1
                   else settings.n_ctx),
            parallel=parallel if parallel > 1 else None,
            spare_sequences=choice.spare_sequences or None,
            # The daemon's own sequences are the cache's first tier (docs/prefix-cache.md):
            # their checkpoints get the budget its slots get.
            checkpoint_mib=max(1, cache.ram_bytes >> 20) if cache.enabled else None,
            threads=settings.threads,
            n_gpu_layers=settings.n_gpu_layers, chunk=settings.chunk, slots=settings.slots,
            draft_block_size=settings.draft_block_size,
            deterministic=settings.deterministic,
            lookup=None if settings.lookup == "off" else settings.lookup,
            draft_tree=settings.draft_tree or None,
            draft_tree_branches=settings.draft_tree_branches,
            rpc=tuple(shards[name].launch.rpc_listen or "" for name in settings.shards),
            override_tensors=settings.override_tensor,
            extra_args=settings.extra_args, env=dict(settings.env),
            **where_runs,  # type: ignore[arg-type]
        )
        # A daemon on another host writes its slot files there: RAM only for it.
        model_cache = cache if settings.host is None else replace(cache, disk_dir=None)
        served.append(ServedModel(
            name=settings.name, info=info, launch=launch, queue_limit=settings.queue_limit,
            max_output_tokens=settings.max_output_tokens, restart_policy=settings.restart,
            prefill=build_compressor(settings.name, settings.prefill, launch,
                                     drafter_path=drafter_path,
                                     pflash_executable=native.binary("pflash"),
                                     restart=settings.restart),
            # With several sequences it serves each (snapshot/restore seq=S, PROTOCOL.md 9).
            prefix_cache=PrefixCache(settings.name, model_cache, launch.slots or DEFAULT_SLOTS),
            residence=Residence(load=settings.load, idle_s=settings.idle_s,
                                idle_action=settings.idle_action, group=settings.group),
            reasoning=_reasoning_default(settings),
            embeddings=settings.embeddings,
            shards=tuple(shards[name] for name in settings.shards),
            parallel_choice=choice,
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


def _parallel_choice(settings: ModelSettings, path: Path, info: GGUFInfo, proxy: bool,
                     backend: str) -> ParallelChoice:
    """``parallel`` as configured, else one with a draft or PFlash, else as
    many sequences as fit the memory (``orchestrator.parallel_default``). The prefix
    cache and prompt lookup run on every sequence (docs/prefix-cache.md, PROTOCOL.md
    9.5): on CPU 4 sequences with lookup gave 48.3 tok/s against 39.4 for 1 with it
    (docs/benchmarks.md, "Engine patches on the CPU")."""
    if settings.parallel is not None:
        return ParallelChoice(settings.parallel, "configured")
    if settings.draft is not None:
        # Configured, a draft runs on every sequence (PROTOCOL.md 9.5); by default one,
        # whose solo loop pads every verify to one batch shape (a CUDA graph).
        return ParallelChoice(1, "draft: one sequence unless parallel is set")
    if proxy or (settings.prefill is not None and settings.prefill.mode != "off"):
        return ParallelChoice(1, "prefill: PFlash drives the target one request at a time")
    return choose_parallel(path, info.size_bytes, settings.n_ctx or N_CTX.default,
                           backend_free_bytes(backend))


def _spare_sequences(settings: ModelSettings, choice: ParallelChoice, path: Path,
                     info: GGUFInfo, backend: str, cache_on: bool, where: str) -> int:
    """``spare_sequences`` as configured, else as many as fit the memory
    (``orchestrator.parallel_default.choose_spare_sequences``), where they serve: the
    prefix cache picks the sequence a conversation runs on (none with the cache off),
    and only on a pool that the daemon's own sequences reuse from (not one KV stream
    each, the deterministic mode, where the cache restores from its slots instead)."""
    if not cache_on:
        # Not an error where configured: the cache is one switch for the whole server
        # (--cache-ram 0 to compare), and /status shows the 0.
        return 0
    why_none = ("parallel is 1 (one sequence, protocol 1)" if choice.parallel == 1
                else "deterministic = true (one KV stream per sequence, restored from "
                     "the cache's slots)" if settings.deterministic
                else "a draft (its context keeps a state for every sequence)"
                if settings.draft is not None
                else None)
    if settings.spare_sequences is not None:
        if settings.spare_sequences > 0 and why_none is not None:
            raise ConfigError(f"{where}: spare_sequences = {settings.spare_sequences} with "
                              f"{why_none}: spare sequences keep conversations for the "
                              "prefix cache to continue where they ran. Fix: set "
                              "spare_sequences = 0, or leave it out.")
        if choice.parallel + settings.spare_sequences > MAX_PARALLEL:
            raise ConfigError(f"{where}: parallel = {choice.parallel} and spare_sequences = "
                              f"{settings.spare_sequences} make more than the daemon's "
                              f"{MAX_PARALLEL} sequences. Fix: make their sum at most "
                              f"{MAX_PARALLEL}.")
        return settings.spare_sequences
    if why_none is not None:
        return 0
    free = choice.free_bytes if choice.free_bytes is not None else backend_free_bytes(backend)
    return choose_spare_sequences(path, info.size_bytes, settings.n_ctx or N_CTX.default,
                                  choice.parallel, free)


def _check_tree(settings: ModelSettings, where: str) -> None:
    if settings.draft_tree and settings.draft is None:
        raise ConfigError(f"{where}: draft_tree = {settings.draft_tree} without a draft: tree "
                          "verify checks the DFlash draft's proposals (prompt lookup's stay "
                          "chains). Fix: add draft = \"<draft.gguf>\", or remove draft_tree.")
    if settings.draft_tree_branches is not None and not settings.draft_tree:
        raise ConfigError(f"{where}: draft_tree_branches is set without draft_tree. Fix: set "
                          "draft_tree (e.g. 22), or remove draft_tree_branches.")


def _check_parallel(settings: ModelSettings, where: str) -> None:
    if settings.parallel is None or settings.parallel == 1:
        return
    if settings.draft_tree:
        raise ConfigError(f"{where}: parallel = {settings.parallel} with draft_tree: a tree "
                          "verify step decodes its branches as sequences of their own, built "
                          "for one running sequence. Fix: set parallel = 1, or remove "
                          "draft_tree.")
    if settings.prefill is not None and settings.prefill.mode != "off":
        raise ConfigError(f"{where}: parallel = {settings.parallel} with [models.prefill]: "
                          "PFlash drives the target one request at a time. Fix: set "
                          "parallel = 1, or remove [models.prefill].")


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
