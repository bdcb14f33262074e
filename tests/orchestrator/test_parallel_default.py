"""``parallel`` left out: as many sequences as fit the memory (orchestrator/parallel_default.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemons.gguf_info import read_gguf_scalars
from daemons.kv_size import sequence_cost
from daemons.native import NativeBuild
from orchestrator.config import build_models, load_config
from orchestrator.errors import ConfigError
from orchestrator.parallel_default import (
    DEFAULT_PARALLEL_CAP,
    KV_SHARE,
    choose_parallel,
    choose_spare_sequences,
)
from protocol import MAX_PARALLEL


def test_the_rule_counts_full_contexts_in_the_free_share(test_models: dict[str, Path]) -> None:
    model = test_models["qwen35"]
    cost = sequence_cost(read_gguf_scalars(model))
    per_sequence = cost.kv_bytes_per_token * 4096 + cost.recurrent_bytes
    weights = 10 << 20
    three = weights + int(3 * per_sequence / KV_SHARE)
    assert choose_parallel(model, weights, 4096, three).parallel == 3
    assert choose_parallel(model, weights, 4096, three - 1).parallel == 2
    assert choose_parallel(model, weights, 4096, weights).parallel == 1  # never below one
    assert choose_parallel(model, 0, 4096, 1 << 50).parallel == DEFAULT_PARALLEL_CAP
    choice = choose_parallel(model, weights, 4096, three)
    assert choice.status()["kv_bytes_per_token"] == cost.kv_bytes_per_token == 1024
    assert choice.status()["recurrent_bytes_per_sequence"] == cost.recurrent_bytes > 0


def test_left_out_it_is_fitted_and_shown(native: NativeBuild, test_models: dict[str, Path],
                                         tmp_path: Path) -> None:
    config = tmp_path / "lucerna.toml"
    # The prefix cache off: the fitted value is applied (with it on, see below).
    config.write_text(f'[server]\ncache_ram_mib = 0\n[[models]]\nname = "a"\n'
                      f'path = "{test_models["qwen3"]}"\nn_ctx = 512\n')
    (model,) = build_models(load_config(config), native)
    choice = model.parallel_status
    assert choice["source"] == "memory" and model.parallel == choice["parallel"]
    # The tiny test model fits the cap on any machine that runs the tests.
    assert model.parallel == DEFAULT_PARALLEL_CAP
    # Each sequence is promised n_ctx tokens of one pool.
    assert model.launch.n_ctx == 512 * DEFAULT_PARALLEL_CAP
    assert model.prefix_cache is not None and not model.prefix_cache.enabled

    # The prefix cache on (the default) serves every sequence: the same fitted value.
    config.write_text(f'[[models]]\nname = "a"\npath = "{test_models["qwen3"]}"\n')
    (model,) = build_models(load_config(config), native)
    assert model.parallel == DEFAULT_PARALLEL_CAP and model.prefix_cache is not None
    assert model.prefix_cache.enabled and model.parallel_status["source"] == "memory"

    config.write_text(f'[[models]]\nname = "a"\npath = "{test_models["qwen3"]}"\nparallel = 2\n'
                      'n_ctx = 300\n')
    (model,) = build_models(load_config(config), native)
    assert model.parallel_status == {"parallel": 2, "source": "configured", "fits": None,
                                     "free_bytes": None, "kv_bytes_per_token": None,
                                     "recurrent_bytes_per_sequence": None,
                                     "spare_sequences": 2}
    assert model.launch.n_ctx == 600


def test_spare_sequences_take_what_the_running_ones_leave(test_models: dict[str, Path]) -> None:
    """One recurrent state each, from the budget left after ``parallel`` sequences; on an
    attention-only model as many as ``parallel``, within the daemon's sequences."""
    model = test_models["qwen35"]
    cost = sequence_cost(read_gguf_scalars(model))
    per_sequence = cost.kv_bytes_per_token * 4096 + cost.recurrent_bytes
    weights = 10 << 20
    two_spares = weights + int((4 * per_sequence + 2 * cost.recurrent_bytes) / KV_SHARE) + 1
    assert choose_spare_sequences(model, weights, 4096, 4, two_spares) == 2
    assert choose_spare_sequences(model, weights, 4096, 4, two_spares - 4) == 1
    assert choose_spare_sequences(model, weights, 4096, 4, weights) == 0
    assert choose_spare_sequences(model, 0, 4096, 4, 1 << 50) == 4
    assert choose_spare_sequences(model, 0, 4096, 40, 1 << 50) == MAX_PARALLEL - 40
    attention_only = test_models["qwen3"]
    assert sequence_cost(read_gguf_scalars(attention_only)).recurrent_bytes == 0
    assert choose_spare_sequences(attention_only, weights, 4096, 4, weights) == 4


def test_spare_sequences_only_where_the_cache_continues_on_them(
        native: NativeBuild, test_models: dict[str, Path], tmp_path: Path) -> None:
    config = tmp_path / "lucerna.toml"
    path = test_models["qwen35"]

    def build(text: str, server: str = "") -> tuple[dict[str, object], list[str]]:
        config.write_text(f'{server}[[models]]\nname = "a"\npath = "{path}"\nn_ctx = 256\n'
                          + text)
        (model,) = build_models(load_config(config), native)
        assert model.n_ctx == 256  # promised per running request, spares or none
        return model.parallel_status, model.launch.daemon_argv(None)

    status, argv = build("parallel = 3\n")
    assert status["spare_sequences"] == 3 and "--parallel=6" in argv and "--n-ctx=768" in argv
    # The daemon's checkpoints get the budget the cache's slots get (here: 64 MiB).
    assert "--checkpoint-mib=64" in build("parallel = 3\n", "[server]\ncache_ram_mib = 64\n")[1]
    status, argv = build("parallel = 3\nspare_sequences = 1\n")
    assert status["spare_sequences"] == 1 and "--parallel=4" in argv
    for text, server in (("parallel = 3\ndeterministic = true\n", ""),
                         ("parallel = 3\n", "[server]\ncache_ram_mib = 0\n"),
                         # The cache off for the whole server: configured spares serve
                         # nothing, and /status says 0.
                         ("parallel = 3\nspare_sequences = 2\n", "[server]\ncache_ram_mib = 0\n"),
                         ("parallel = 1\n", "")):
        status, argv = build(text, server)
        assert status["spare_sequences"] == 0, text
        bounded = any(a.startswith("--checkpoint-mib=") for a in argv)
        assert bounded == ("cache_ram_mib = 0" not in server), text
        assert not any(a.startswith("--parallel=") and a != "--parallel=3" for a in argv)
    with pytest.raises(ConfigError, match="spare_sequences = 2 with deterministic"):
        build("parallel = 3\ndeterministic = true\nspare_sequences = 2\n")
    with pytest.raises(ConfigError, match="Fix: make their sum at most"):
        build(f"parallel = 40\nspare_sequences = {MAX_PARALLEL - 39}\n")
