"""The generator's random weights keep activations in a trained model's range.

``lucerna-mkmodels --probe`` prefills pseudo-random tokens on the CPU and reports the
largest |x| of each watched activation per layer (native/src/mkmodels/activation_probe.h).
Before issue 14, every qwen35-shaped file drew its Gated DeltaNet decay rates around
zero, so half the heads' state grew by a constant factor per token: past 1e9 after 256
tokens, F32 overflow and NaN logits near 1000 (docs/benchmarks.md, "Numerically sane
27B test weights"). A bound far under F16's 65504 also keeps an F16 KV cache and the GPU
kernels' F16 intermediates finite.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

# Trained models keep their residual stream within a few hundred; our files measure
# under 10 (docs/benchmarks.md). F16 overflows at 65504.
BOUND = 1000.0


def probe(native: Any, model: Path, tokens: int) -> list[dict[str, str]]:
    done = subprocess.run([str(native.mkmodels), "--probe", str(model), "--tokens", str(tokens),
                           "--threads", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = []
    for line in done.stdout.splitlines():
        words = line.split(" ")
        assert words[0] == "probe", line
        stats.append({"name": words[1], **dict(word.split("=", 1) for word in words[2:])})
    return stats


def out_of_range(stats: list[dict[str, str]]) -> list[dict[str, str]]:
    return [s for s in stats if s["nonfinite"] != "0" or float(s["max_abs"]) >= BOUND]


@pytest.mark.slow
def test_the_qwen35_test_model_stays_in_range_over_a_long_prompt(
        native: Any, test_models: dict[str, Path]) -> None:
    stats = probe(native, test_models["qwen35"], 2048)
    names = {s["name"] for s in stats}
    # The probe saw what it is for: the residual stream, the DeltaNet state, the KV
    # entries of the attention layers and the logits.
    assert {"l_out", "new_state", "Kcur", "Vcur", "result_output"} <= names, names
    assert out_of_range(stats) == []


@pytest.mark.slow
def test_the_27b_shape_cut_to_four_layers_stays_in_range(native: Any, tmp_path: Path) -> None:
    # The 27B target itself (16.6 GB) is written on the GPU machine only; its first four
    # layers (one attention, three Gated DeltaNet, the full 248K vocabulary) are the
    # same code at the same widths.
    done = subprocess.run([str(native.mkmodels), "--shape", "qwen36-27b", "--layers", "4", "--out",
                           str(tmp_path), "--threads", "2", "--piece-pool", "8"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = probe(native, tmp_path / "qwen36-27b-4l.gguf", 1024)
    assert [s["layer"] for s in stats if s["name"] == "l_out"] == ["0", "1", "2", "3"]
    assert out_of_range(stats) == []
