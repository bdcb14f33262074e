"""One sequence's cost from the GGUF header, checked against what the engine allocates."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from daemons.gguf_info import read_gguf_scalars
from daemons.kv_size import sequence_cost
from daemons.native import NativeBuild

# The engine's log line for its KV cache and recurrent-state buffers (LUCERNA_LOG=info).
KV_LINE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers")
RS_LINE = re.compile(r"RS buffer size = +([\d.]+) MiB")
POOL = 1024  # tokens of KV, shared by the daemon's two sequences


@pytest.mark.parametrize("model", ["qwen3", "qwen35", "laguna"])
def test_kv_bytes_per_token_is_what_the_engine_allocates(
        native: NativeBuild, test_models: dict[str, Path], model: str) -> None:
    role = "laguna" if model == "laguna" else "qwen35"
    run = subprocess.run([str(native.binary(role)), str(test_models[model]), f"--n-ctx={POOL}",
                          "--parallel=2", "--threads=1"], input="quit\n", capture_output=True,
                         text=True, timeout=120, env={**os.environ, "LUCERNA_LOG": "info"})
    cost = sequence_cost(read_gguf_scalars(test_models[model]))
    kv = KV_LINE.search(run.stderr)
    assert kv is not None, run.stderr[-2000:]
    layers = int(kv[3])
    sliding = model == "laguna"  # its window layers keep their own, smaller cache
    if not sliding:
        assert layers == cost.attention_layers
        # The engine prints two decimals of MiB: compare at that precision.
        assert float(kv[1]) == pytest.approx(cost.kv_bytes_per_token * POOL / 2**20, abs=0.006)
    else:
        assert float(kv[1]) <= cost.kv_bytes_per_token * POOL / 2**20  # an upper bound
    rs = RS_LINE.search(run.stderr)
    if model == "qwen35":
        assert rs is not None and float(rs[1]) == pytest.approx(
            2 * cost.recurrent_bytes / 2**20, abs=0.006)
    else:
        assert cost.recurrent_bytes == 0
