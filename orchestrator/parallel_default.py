"""``parallel`` when the config leaves it out: as many sequences as fit the memory.

The rule (docs/batching.md says it for users):

    N = min(DEFAULT_PARALLEL_CAP,
            (free - weights) * KV_SHARE // (kv_bytes_per_token * n_ctx + recurrent))

at least 1, where ``free`` is the memory available on the backend the daemon runs on
(the host's available RAM for the CPU build, the GPUs' free memory for CUDA), ``weights``
the GGUF's size (not loaded yet when the server starts), ``kv_bytes_per_token`` and
``recurrent`` one sequence's cost from the GGUF header (``daemons.kv_size``), and
``n_ctx`` the context one request is promised. The daemon's KV pool then holds
``n_ctx * N`` tokens (``pool_tokens``), unified: a request may use more than ``n_ctx``
while the others leave it room, and the daemon preempts when it runs short.

``KV_SHARE`` leaves the other half to the engine's compute buffers, the prefix cache
(a quarter of available RAM by default) and other models; the cap keeps one
request's decode pace from falling too far on a CPU (every step carries all N).

Beside them the daemon keeps up to as many **spare sequences** (``spare_sequences``,
``choose_spare_sequences``): sequences no request generates on, which keep the
conversations of earlier turns where they ran, so that a conversation's next turn
finds its state without a snapshot or a restore. Their KV lives in the same pool (the
daemon drops it first when the pool runs short, PROTOCOL.md 9.6); what each adds is
one recurrent state, so on a hybrid model they take what the budget leaves after the
``N`` sequences, and on an attention-only model they cost nothing up front.

A model with PFlash serves one request at a time, and one with a draft does unless
``parallel`` is set (``config._build._parallel_choice`` says why in ``source``). The
prefix cache, on by default, does not hold ``parallel`` back: it serves every sequence
(orchestrator/prefix_cache.py), so ``source`` is ``memory`` with it on or off.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from daemons.gguf_info import read_gguf_scalars
from daemons.kv_size import SequenceCost, sequence_cost
from protocol import MAX_PARALLEL

__all__ = ["DEFAULT_PARALLEL_CAP", "KV_SHARE", "ParallelChoice", "backend_free_bytes",
           "choose_parallel", "choose_spare_sequences", "pool_tokens"]

DEFAULT_PARALLEL_CAP = 8
"""At most this many sequences by default; set ``parallel`` for more."""
KV_SHARE = 0.5
"""The share of the free memory (after the weights) that the sequences may take."""


@dataclass(frozen=True)
class ParallelChoice:
    """``parallel`` and where it came from, for ``/props`` and ``/status``."""

    parallel: int
    source: str
    """``configured``, or ``memory`` (the rule above), or why one (``draft``, ...)."""
    fits: int | None = None
    """What the memory rule gave, when something else made ``parallel`` smaller."""
    free_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    recurrent_bytes: int | None = None
    spare_sequences: int = 0
    """Sequences beyond ``parallel`` that keep conversations between turns."""

    def status(self) -> dict[str, object]:
        return {"parallel": self.parallel, "source": self.source, "fits": self.fits,
                "free_bytes": self.free_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
                "recurrent_bytes_per_sequence": self.recurrent_bytes,
                "spare_sequences": self.spare_sequences}


def pool_tokens(n_ctx: int, parallel: int) -> int:
    """The daemon's ``--n-ctx``: ``n_ctx`` tokens for each of its sequences, one pool."""
    return n_ctx * parallel


def backend_free_bytes(backend: str) -> int:
    """Memory available where the KV cache lives: the GPUs' free memory on a CUDA build
    (``nvidia-smi``; the host's RAM when it cannot answer), else the host's."""
    if backend == "cuda" and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=True).stdout
            return sum(int(line) for line in out.split()) << 20
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return int(psutil.virtual_memory().available)


def choose_parallel(model: Path, weights_bytes: int, n_ctx: int, free_bytes: int,
                    kv_type: str = "f16") -> ParallelChoice:
    """The rule of the module docstring for the GGUF at ``model``."""
    cost: SequenceCost = sequence_cost(read_gguf_scalars(model), kv_type)
    per_sequence = max(1, cost.bytes_for(n_ctx))
    budget = max(0, free_bytes - weights_bytes) * KV_SHARE
    parallel = max(1, min(DEFAULT_PARALLEL_CAP, int(budget // per_sequence)))
    return ParallelChoice(parallel, "memory", free_bytes=free_bytes,
                          kv_bytes_per_token=cost.kv_bytes_per_token,
                          recurrent_bytes=cost.recurrent_bytes)


def choose_spare_sequences(model: Path, weights_bytes: int, n_ctx: int, parallel: int,
                           free_bytes: int, kv_type: str = "f16") -> int:
    """Spare sequences for ``parallel`` running ones of the GGUF at ``model``: as many as
    ``parallel`` (the daemon's sequences stay within ``MAX_PARALLEL``), fewer where their
    recurrent states do not fit what the budget of the module docstring leaves after the
    ``parallel`` sequences' cost."""
    cost: SequenceCost = sequence_cost(read_gguf_scalars(model), kv_type)
    most = max(0, min(parallel, MAX_PARALLEL - parallel))
    if cost.recurrent_bytes <= 0:
        return most
    left = max(0, free_bytes - weights_bytes) * KV_SHARE - parallel * cost.bytes_for(n_ctx)
    return max(0, min(most, int(left // cost.recurrent_bytes)))
