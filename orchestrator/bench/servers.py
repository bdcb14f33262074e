"""The two servers of a self-contained benchmark, started as a user would start them.

``lucerna serve`` and llama.cpp's ``llama-server`` (the peer, ``daemons.peer``) run
as subprocesses on the same GGUF with the same engine settings. What "the same"
means, flag by flag, is ``llama_server_argv``'s job; ``ServerSettings`` is the one
place both command lines are derived from.

Lucerna's daemon creates its context with the engine's defaults
(``llama_context_default_params``) except ``n_batch = n_ubatch = min(n_ctx, chunk)``
(chunk 512), one sequence, and ``--threads`` for both decode and batch threads.
llama-server's defaults differ in places that change speed or memory, so each is
set explicitly: batch and micro-batch, threads and batch threads, its slots (Lucerna's
``--parallel``, one by default), the
full-size SWA cache (the engine default, not llama-server's), f16 KV, flash
attention ``auto``, and no fitting of unset parameters to free memory (it may shrink
the context). Sampling is made equal per request (``temperature: 0``, greedy).

Prompt caches are compared as users run them: by default both servers keep theirs on
with their own defaults (Lucerna's prefix cache, whose RAM budget is a quarter of
available memory; llama-server's ``cache_prompt`` with its checkpoints and its 8 GiB
``--cache-ram``). ``ServerSettings.prompt_cache = False`` turns both off (Lucerna
``--cache-ram 0``; llama-server ``--no-cache-prompt --cache-ram 0``, and every request
says ``cache_prompt: false`` too, see ``llama_server_body``), so that every request
prefills from its first token: the fair footing for single-request prefill and decode
figures.

A model without a chat template of its own (the embedded gemma3-270m) is given
Lucerna's fallback template on both sides: llama-server would otherwise use ChatML, and
the two servers would prefill different prompts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from daemons.paths import repo_root
from orchestrator.errors import OrchestratorError
from orchestrator.parallel_default import pool_tokens

__all__ = [
    "BenchServerError",
    "ServerProcess",
    "ServerSettings",
    "free_port",
    "llama_server_argv",
    "llama_server_body",
    "lucerna_argv",
]

# The daemon's prefill chunk (native/src/daemon/args.h); one chunk is one engine batch.
DAEMON_CHUNK = 512
_STOP_ESCALATION: tuple[tuple[signal.Signals, float], ...] = (
    (signal.SIGTERM, 30.0),
    (signal.SIGKILL, 10.0),
)


class BenchServerError(OrchestratorError):
    """A server of the benchmark did not start or did not become healthy."""


@dataclass(frozen=True)
class ServerSettings:
    model: Path
    n_ctx: int
    threads: int
    n_gpu_layers: int | None = None
    """None: all layers (both servers' default on a GPU build)."""
    queue_limit: int = 16
    prompt_cache: bool = True
    """Both servers' prompt caches on (their defaults) or both off."""
    kv_cache_dir: Path | None = None
    """Lucerna's disk tier (``--kv-cache-dir``); llama-server has none to match."""
    chat_template_file: Path | None = None
    """A Jinja chat template for llama-server, when the model has none of its own."""
    parallel: int = 1
    """Requests that generate at once: Lucerna's ``--parallel``, llama-server's slots.
    ``n_ctx`` is each one's context: both hold one unified KV pool of ``n_ctx * parallel``
    tokens (Lucerna's ``--n-ctx`` is per sequence, llama-server's ``--ctx-size`` the pool,
    with ``--kv-unified``)."""
    spare_sequences: int | None = None
    """Lucerna's ``--spare-sequences``; None: its default."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lucerna_argv(settings: ServerSettings, port: int, model_name: str) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator.cli", "serve", "--model", str(settings.model),
            "--model-name", model_name, "--host", "127.0.0.1", "--port", str(port),
            "--n-ctx", str(settings.n_ctx), "--threads", str(settings.threads),
            "--queue-limit", str(settings.queue_limit)]
    argv += ["--parallel", str(settings.parallel)]  # never the memory-fitted default
    if settings.spare_sequences is not None:
        argv += ["--spare-sequences", str(settings.spare_sequences)]
    if settings.n_gpu_layers is not None:
        argv += ["--n-gpu-layers", str(settings.n_gpu_layers)]
    if not settings.prompt_cache:
        argv += ["--cache-ram", "0"]
    if settings.kv_cache_dir is not None:
        argv += ["--kv-cache-dir", str(settings.kv_cache_dir)]
    return argv


def llama_server_argv(binary: Path, settings: ServerSettings, port: int,
                      model_name: str) -> list[str]:
    batch = str(min(settings.n_ctx, DAEMON_CHUNK))
    ngl = settings.n_gpu_layers
    argv = [
        str(binary), "--model", str(settings.model), "--alias", model_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(pool_tokens(settings.n_ctx, settings.parallel)),
        "--parallel", str(settings.parallel),
        "--threads", str(settings.threads), "--threads-batch", str(settings.threads),
        "--batch-size", batch, "--ubatch-size", batch,
        "--n-gpu-layers", "all" if ngl is None or ngl < 0 else str(ngl),
        "--cache-type-k", "f16", "--cache-type-v", "f16", "--flash-attn", "auto",
        "--swa-full", "--fit", "off",
    ]
    if settings.parallel > 1:
        argv += ["--kv-unified"]
    if not settings.prompt_cache:
        argv += ["--no-cache-prompt", "--cache-ram", "0"]
    if settings.chat_template_file is not None:
        argv += ["--chat-template-file", str(settings.chat_template_file)]
    return [*argv, "--no-webui"]


def llama_server_body(settings: ServerSettings) -> dict[str, object]:
    """What every request to llama-server carries besides the prompt: with the cache off,
    its per-request switch as well as the flag (the figures before issue 12 were made so;
    the pinned server's per-request default follows the flag)."""
    return {} if settings.prompt_cache else {"cache_prompt": False}


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the benchmark process dies, however it
    dies (Linux ``PR_SET_PDEATHSIG``), so a killed benchmark leaves no servers behind."""
    pr_set_pdeathsig = 1
    # Not Linux: nothing to do; stop() still runs on every orderly exit.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


class ServerProcess:
    """A server subprocess with its log in a file; ``stop`` always reaps it."""

    def __init__(self, label: str, argv: Sequence[str], port: int, log_path: Path) -> None:
        self.label = label
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._log = log_path.open("wb")
        # Its own session, so a Ctrl-C in our terminal does not reach it before we
        # stop it in order, and so stop() can signal everything it started.
        self.process = subprocess.Popen(
            self.argv, cwd=repo_root(), stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
            preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchServerError(
                    f"{self.label} exited with status {self.process.returncode} before it "
                    f"was healthy; its log ({self.log_path}) ends:\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise BenchServerError(f"{self.label} was not healthy after {timeout:.0f} s; its log "
                               f"({self.log_path}) ends:\n{self.log_tail()}")

    def stop(self) -> int:
        """SIGTERM, wait; then SIGKILL the session, wait; always reap."""
        try:
            for sig, grace in _STOP_ESCALATION:
                if self.process.poll() is not None:
                    break
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    continue
            return self.process.wait()
        finally:
            self._log.close()
