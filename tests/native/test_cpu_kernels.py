"""The batched CPU matmul kernels agree with the engine's one-row path
(``lucerna-mkmodels --kernel-check``, native/src/mkmodels/kernel_check.h).

A matmul over two or more activation rows (a prefill chunk, a verify block, a step of
several sequences) takes llamafile's tinyBLAS where the weight type has a kernel there;
one row takes the type's ``vec_dot``. Our patch 0105 gives Q4_1 (the chat default
SmolLM2's weights) a tinyBLAS kernel. Both read the same blocks and quantize the
activations the same way, so a batched row must come out as that row alone does, to
float rounding; a block's scale or min term gone wrong is off by far more (a min term
scaled by 0.999 puts 0.16 on outputs of about 80).
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

_LINE = re.compile(r"kernel_check type=(\S+) rows=(\d+) max_abs_diff=(\S+) max_abs=(\S+)")
# Measured on the 2-core CPU box: every batch size of every type below gives exactly the
# one-row outputs (max_abs_diff 0), the same products summed in the same order. The bound
# allows float rounding of outputs of this size, not a wrong term.
RELATIVE_TOLERANCE = 1e-6


@pytest.mark.parametrize("weight_type", ["q4_1", "q4_0", "q8_0"])
def test_a_batched_matmul_gives_each_row_its_one_row_result(native: Any, weight_type: str) -> None:
    done = subprocess.run([str(native.mkmodels), "--kernel-check", weight_type],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    checks = [_LINE.fullmatch(line) for line in done.stdout.splitlines()]
    assert checks and all(checks), done.stdout
    rows = [int(check[2]) for check in checks if check]
    assert rows == [2, 3, 4, 5, 7, 8, 13, 16], rows
    for check in checks:
        assert check is not None and check[1] == weight_type
        diff, scale = float(check[3]), float(check[4])
        assert scale > 1.0 and diff <= RELATIVE_TOLERANCE * scale, check[0]


def test_an_unknown_weight_type_is_refused(native: Any) -> None:
    done = subprocess.run([str(native.mkmodels), "--kernel-check", "q9_9"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "no quantized engine type is named 'q9_9'" in done.stderr


def test_the_gpu_matmul_check_says_when_there_is_no_gpu(native: Any) -> None:
    # --gpu-matmul-check (mkmodels/gpu_matmul_check.h) measures engine patch 0203's CUDA
    # kernel against the CPU backend (what it measured: git show
    # 7a0c96e:docs/benchmarks.md, "A small-batch K-quant kernel"). A build
    # without a GPU backend, as CI's, says so instead of timing the CPU.
    done = subprocess.run([str(native.mkmodels), "--gpu-matmul-check", "q4_K"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "no GPU backend" in done.stderr, done.stderr
