"""What one sequence of a model costs in memory, from its GGUF header (no weights read).

A ``--parallel N`` daemon holds N sequences (PROTOCOL.md 9). Each costs the attention
KV cache of its tokens, ``kv_bytes_per_token`` per token, and, on a hybrid model
(qwen35: Gated DeltaNet layers between the attention ones), a fixed recurrent state
(``recurrent_bytes``: the conv window and the delta-rule state of every recurrent
layer, F32 as the engine keeps them). ``orchestrator/parallel_default.py`` sizes
``parallel`` from these.

Sliding-window layers (gemma3, laguna) are counted like full attention layers: an
upper bound, since the engine caps their cache at the window, which keeps the figure
simple and never too small.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemons.gguf_info import Scalar

__all__ = ["KV_TYPE_BYTES", "SequenceCost", "sequence_cost"]

KV_TYPE_BYTES: dict[str, float] = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}
"""Bytes per element of each ``--kv-type`` (q8_0: 32 values in 34 bytes)."""

_F32 = 4


@dataclass(frozen=True)
class SequenceCost:
    """What one sequence holds: KV bytes per token, and a fixed recurrent state."""

    kv_bytes_per_token: int
    recurrent_bytes: int
    attention_layers: int

    def bytes_for(self, n_tokens: int) -> int:
        """A sequence of ``n_tokens`` tokens."""
        return self.kv_bytes_per_token * n_tokens + self.recurrent_bytes


def _int(scalars: dict[str, Scalar], key: str, default: int = 0) -> int:
    value = scalars.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def sequence_cost(scalars: dict[str, Scalar], kv_type: str = "f16") -> SequenceCost:
    """The cost of one sequence of the model whose GGUF scalars are ``scalars``.

    Keys read (``ARCH.`` prefix): ``block_count``, ``embedding_length``,
    ``attention.head_count``, ``attention.head_count_kv`` (a per-layer array is skipped
    by the header reader: then ``head_count``), ``attention.key_length`` and
    ``attention.value_length`` (default: ``embedding_length / head_count``),
    ``full_attention_interval`` (hybrid: every k-th layer is attention, the others
    recurrent) and ``ssm.*`` for the recurrent state.
    """
    arch = str(scalars.get("general.architecture", ""))

    def key(name: str, default: int = 0) -> int:
        return _int(scalars, f"{arch}.{name}", default)

    n_layer = key("block_count")
    n_embd = key("embedding_length")
    n_head = max(1, key("attention.head_count", 1))
    n_head_kv = key("attention.head_count_kv", n_head) or n_head
    head_k = key("attention.key_length", n_embd // n_head)
    head_v = key("attention.value_length", n_embd // n_head)
    interval = key("full_attention_interval")
    attention_layers = n_layer // interval if interval > 0 else n_layer
    recurrent_layers = n_layer - attention_layers
    kv = n_head_kv * (head_k + head_v) * attention_layers * KV_TYPE_BYTES[kv_type]
    recurrent = 0
    if recurrent_layers:
        inner = key("ssm.inner_size")
        state = key("ssm.state_size")
        groups = key("ssm.group_count")
        kernel = key("ssm.conv_kernel")
        # Per layer: the conv window over q, k and v ((kernel - 1) columns), and the
        # delta-rule state of every value head (head_v_dim x head_k_dim = inner x state).
        conv = max(0, kernel - 1) * (inner + 2 * groups * state)
        recurrent = (conv + inner * state) * _F32 * recurrent_layers
    return SequenceCost(kv_bytes_per_token=round(kv), recurrent_bytes=recurrent,
                        attention_layers=attention_layers)
