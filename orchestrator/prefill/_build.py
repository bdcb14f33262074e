"""From a model's validated settings to its ``PrefillCompressor`` (used by build_models)."""

from __future__ import annotations

from pathlib import Path

from daemons.roles import DaemonLaunch, role_named
from orchestrator.prefill._pipeline import PrefillCompressor
from orchestrator.prefill._settings import PrefillSettings
from orchestrator.supervisor import RestartPolicy

__all__ = ["build_compressor", "is_proxy", "served_path"]


def is_proxy(settings: PrefillSettings | None) -> bool:
    """Proxy mode: an upstream generates; the model's own daemon is the drafter."""
    return settings is not None and settings.upstream is not None


def served_path(model_path: str, settings: PrefillSettings | None) -> str:
    """The GGUF the model's own daemon loads: in proxy mode, ``drafter`` when given."""
    if settings is not None and is_proxy(settings) and settings.drafter is not None:
        return settings.drafter
    return model_path


def build_compressor(name: str, settings: PrefillSettings | None, model: DaemonLaunch, *,
                     drafter_path: Path | None, pflash_executable: Path,
                     restart: RestartPolicy) -> PrefillCompressor | None:
    """The model's compressor, or None when compression is off and nothing is proxied.

    Outside proxy mode the drafter daemon inherits the target's context size, threads,
    offload, launcher and environment unless the prefill table sets its own.
    """
    if settings is None or (settings.mode == "off" and settings.upstream is None):
        return None
    drafter = None
    if settings.upstream is None:
        assert drafter_path is not None
        drafter = DaemonLaunch(
            role=role_named("pflash"), executable=pflash_executable, model=drafter_path,
            n_ctx=settings.n_ctx or model.n_ctx,
            threads=settings.threads or model.threads,
            n_gpu_layers=(model.n_gpu_layers if settings.n_gpu_layers is None
                          else settings.n_gpu_layers),
            launcher=model.launcher, env=dict(model.env),
        )
    return PrefillCompressor(name, settings, drafter, restart_policy=restart)
