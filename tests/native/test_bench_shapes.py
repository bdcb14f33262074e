"""``lucerna-mkmodels --shape``: full-size random-weight benchmark models.

Only the PFlash drafter shape (0.64 GB, seconds to write) runs here; the 27B target
and its DFlash draft are the same code at sizes only the GPU machine writes
(docs/gpu.md). The drafter must carry Qwen3-0.6B's real shape and vocabulary,
and serve ``compress`` on the pflash daemon.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import gguf
import pytest

from tests.native.conftest import Daemon


def write_drafter(native: Any, out: Path, *flags: str) -> Path:
    done = subprocess.run([str(native.mkmodels), "--shape", "qwen3-0.6b", "--out", str(out),
                           "--threads", "2", *flags], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert not (out / "qwen3-0.6b.gguf.partial").exists()
    return out / "qwen3-0.6b.gguf"


@pytest.fixture(scope="module")
def drafter(native: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_drafter(native, tmp_path_factory.mktemp("drafter"))


@pytest.mark.slow
def test_the_pflash_drafter_shape_is_qwen3_0_6b_and_compresses(native: Any, drafter: Path) -> None:
    path = drafter

    reader = gguf.GGUFReader(path)
    fields = {name: reader.fields[name].contents() for name in (
        "general.architecture", "qwen3.block_count", "qwen3.embedding_length",
        "qwen3.feed_forward_length", "qwen3.attention.head_count",
        "qwen3.attention.head_count_kv", "qwen3.attention.key_length")}
    assert fields == {"general.architecture": "qwen3", "qwen3.block_count": 28,
                      "qwen3.embedding_length": 1024, "qwen3.feed_forward_length": 3072,
                      "qwen3.attention.head_count": 16, "qwen3.attention.head_count_kv": 8,
                      "qwen3.attention.key_length": 128}
    names = {tensor.name for tensor in reader.tensors}
    assert "output.weight" not in names  # tied embeddings, as the checkpoint has
    params = sum(int(tensor.n_elements) for tensor in reader.tensors)
    assert 0.55e9 < params < 0.65e9  # Qwen3-0.6B: 0.6 B with the embedding counted once

    daemon = Daemon(native.binary("pflash"), path, "--n-ctx=1024", "--threads=1")
    try:
        ready = daemon.ready()
        assert (ready["arch"], ready["vocab"]) == ("qwen3", "151936")
        prompt = "ids:" + ",".join(str(1000 + i) for i in range(256))
        kept, reply = daemon.stream_command(f"compress {prompt} 250")
        assert daemon.ok(reply, "compress")["n_out"] == str(len(kept))
        assert 0 < len(kept) < 256
    finally:
        daemon.close()


def tensor_layout(path: Path) -> list[tuple[str, int, list[int], int]]:
    reader = gguf.GGUFReader(path)
    return [(t.name, int(t.tensor_type), [int(n) for n in t.shape], int(t.data_offset))
            for t in reader.tensors]


@pytest.mark.slow
def test_a_piece_pool_writes_the_same_layout_from_fewer_distinct_pieces(
        native: Any, drafter: Path, tmp_path: Path) -> None:
    # --piece-pool trades distinct values for minutes on the 27B target; the file must
    # still be the same model to the engine: same tensors, types, shapes and offsets.
    pooled = write_drafter(native, tmp_path, "--piece-pool", "2")
    assert pooled.stat().st_size == drafter.stat().st_size
    assert tensor_layout(pooled) == tensor_layout(drafter)
    # The pool is real: blk.0 and blk.1's gate weights (same kind) now share their bytes
    # with at most two distinct pieces between all pieces of that kind.
    reader = gguf.GGUFReader(pooled)
    gates = [bytes(t.data) for t in reader.tensors if t.name.endswith("ffn_gate.weight")]
    piece = len(gates[0]) // 3  # 3072 rows of 1024: three pieces of 1024 rows (2^20 values)
    distinct = {gate[i * piece:(i + 1) * piece] for gate in gates for i in range(3)}
    assert len(distinct) <= 2
    daemon = Daemon(native.binary("pflash"), pooled, "--n-ctx=1024", "--threads=1")
    try:
        daemon.ready()
        prompt = "ids:" + ",".join(str(1000 + i) for i in range(256))
        kept, reply = daemon.stream_command(f"compress {prompt} 250")
        assert daemon.ok(reply, "compress")["n_out"] == str(len(kept))
    finally:
        daemon.close()
