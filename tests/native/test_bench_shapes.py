"""``lucerna-mkmodels --shape``: full-size random-weight benchmark models.

Only the PFlash drafter shape (0.64 GB, seconds to write) runs here; the 27B target
and its DFlash draft are the same code at sizes only the GPU machine writes
(docs/benchmarks.md). The drafter must carry Qwen3-0.6B's real shape and vocabulary,
and serve ``compress`` on the pflash daemon.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import gguf
import pytest

from tests.native.conftest import Daemon


@pytest.mark.slow
def test_the_pflash_drafter_shape_is_qwen3_0_6b_and_compresses(native: Any, tmp_path: Path) -> None:
    done = subprocess.run([str(native.mkmodels), "--shape", "qwen3-0.6b", "--out", str(tmp_path),
                           "--threads", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "qwen3-0.6b.gguf"
    assert not (tmp_path / "qwen3-0.6b.gguf.partial").exists()

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
