"""daemons.testmodels and lucerna-mkmodels: deterministic, small, working test GGUFs."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import time
from pathlib import Path
from typing import Any, BinaryIO

from daemons import testmodels
from daemons.engine import ensure_engine_source
from daemons.native import ensure_native
from daemons.testmodels import TEST_MODEL_NAMES, TEST_MODEL_SEED, ensure_test_models, models_dir


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# A minimal GGUF reader, independent of the engine. (gguf.GGUFReader works too but takes
# seconds per file on 150k-entry tokenizer arrays.)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_GGML_TYPES = {0: "F32", 1: "F16"}


def _read(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def _read_value(f: BinaryIO, vtype: int) -> Any:
    if vtype == 8:
        return f.read(_read(f, "<Q")).decode()
    if vtype == 9:
        etype, count = _read(f, "<I"), _read(f, "<Q")
        return [_read_value(f, etype) for _ in range(count)]
    return _read(f, _SCALARS[vtype])


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(key/values, tensor name -> type name) of a GGUF file."""
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF" and _read(f, "<I") == 3
        n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
        kvs = {}
        for _ in range(n_kv):
            key = f.read(_read(f, "<Q")).decode()
            kvs[key] = _read_value(f, _read(f, "<I"))
        tensors = {}
        for _ in range(n_tensors):
            name = f.read(_read(f, "<Q")).decode()
            n_dims = _read(f, "<I")
            f.read(8 * n_dims)
            tensors[name] = _GGML_TYPES.get(_read(f, "<I"), "other")
            f.read(8)  # offset
    return kvs, tensors


def gguf_arch(path: Path) -> str:
    return str(read_gguf(path)[0]["general.architecture"])


def test_public_api() -> None:
    assert testmodels.__all__ == [
        "TEST_MODEL_NAMES",
        "TEST_MODEL_SEED",
        "ensure_test_models",
        "mkmodels_vocabularies",
        "models_dir",
    ]


def test_ensure_test_models_writes_every_model() -> None:
    models = ensure_test_models(progress=lambda _line: None)
    assert set(models) == {"qwen35", "qwen3", "laguna", "deepseek4", "dflash"}
    for name, path in models.items():
        assert path == models_dir() / f"{name}.gguf"
        assert path.is_file()
        assert gguf_arch(path) == name
    total = sum(path.stat().st_size for path in models.values())
    assert total < 150e6
    stamp = json.loads((models_dir() / "stamp.json").read_text())
    assert stamp["seed"] == TEST_MODEL_SEED and stamp["models"] == list(TEST_MODEL_NAMES)


def test_second_call_reuses_the_cache() -> None:
    models = ensure_test_models(progress=lambda _line: None)
    mtimes = {name: path.stat().st_mtime_ns for name, path in models.items()}
    lines: list[str] = []
    started = time.monotonic()
    again = ensure_test_models(progress=lines.append)
    assert time.monotonic() - started < 10
    assert again == models
    assert {name: path.stat().st_mtime_ns for name, path in again.items()} == mtimes
    assert lines == []


def test_the_qwen_models_carry_the_real_qwen_tokenizer() -> None:
    models = ensure_test_models(progress=lambda _line: None)
    kvs, tensors = read_gguf(models["qwen35"])
    assert kvs["tokenizer.ggml.pre"] == "qwen35"
    assert len(kvs["tokenizer.ggml.tokens"]) == 151936
    assert kvs["tokenizer.ggml.tokens"][151644] == "<|im_start|>"
    assert "im_start" in kvs["tokenizer.chat_template"]
    assert tensors["token_embd.weight"] == "F16" and tensors["output_norm.weight"] == "F32"
    assert read_gguf(models["qwen3"])[0]["tokenizer.ggml.pre"] == "qwen2"

    draft_kvs, draft_tensors = read_gguf(models["dflash"])
    assert draft_kvs["dflash.target_layers"] == [0, 1, 3]
    assert draft_kvs["dflash.block_size"] == 16
    assert draft_kvs["dflash.embedding_length"] == kvs["qwen35.embedding_length"]
    assert draft_kvs["tokenizer.ggml.mask_token_id"] == 151669
    assert "fc.weight" in draft_tensors
    assert "token_embd.weight" not in draft_tensors  # it shares its target's


def test_generation_is_deterministic_and_every_model_runs(tmp_path: Path) -> None:
    """Regenerate with the same seed: same bytes. --verify loads each file back and runs
    it in a real llama_context (the DFlash draft against its qwen35 target)."""
    cached = ensure_test_models(progress=lambda _line: None)
    build = ensure_native(progress=lambda _line: None)
    result = subprocess.run(
        [str(build.mkmodels), "--out", str(tmp_path), "--seed", str(TEST_MODEL_SEED), "--verify"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in TEST_MODEL_NAMES:
        assert sha256(tmp_path / f"{name}.gguf") == sha256(cached[name]), name

    verified = {}
    for line in result.stdout.splitlines():
        words = line.split(" ")
        assert words[0] == "verify"
        fields = dict(word.split("=", 1) for word in words[2:] if "=" in word)
        verified[words[1]] = fields
    assert set(verified) == set(TEST_MODEL_NAMES)
    for name, fields in verified.items():
        assert fields["arch"] == name
        assert fields["loaded"] == "1" and fields["generated"] == "1", (name, fields)
        tokens = [int(t) for t in fields["tokens"].split(",")]
        assert tokens and all(0 <= t < int(fields["n_vocab"]) for t in tokens)
    assert len(verified["dflash"]["tokens"].split(",")) == 15  # block_size - 1 drafted


def test_a_different_seed_gives_different_weights(tmp_path: Path) -> None:
    cached = ensure_test_models(progress=lambda _line: None)
    build = ensure_native(progress=lambda _line: None)
    subprocess.run(
        [str(build.mkmodels), "--out", str(tmp_path), "--seed", "7", "--only", "laguna"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert sha256(tmp_path / "laguna.gguf") != sha256(cached["laguna"])
    assert not (tmp_path / "qwen35.gguf").exists()


def test_the_vocabularies_mkmodels_names_are_in_the_engine_tree() -> None:
    """bin/gpu-h200-pack carries these alone of the engine's models/, and
    bin/gpu-h200-bench refuses a tree without them: the list must match what
    lucerna-mkmodels opens."""
    names = testmodels.mkmodels_vocabularies()
    # The Qwen models (the test models and the 27B bench shape), laguna, deepseek4.
    assert names == ["ggml-vocab-deepseek-coder.gguf", "ggml-vocab-gpt-2.gguf",
                     "ggml-vocab-qwen35.gguf"]
    models = ensure_engine_source() / "models"
    assert all((models / name).is_file() for name in names)
