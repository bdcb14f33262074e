"""``parallel`` left out: as many sequences as fit the memory (orchestrator/parallel_default.py)."""

from __future__ import annotations

from pathlib import Path

from daemons.gguf_info import read_gguf_scalars
from daemons.kv_size import sequence_cost
from daemons.native import NativeBuild
from orchestrator.config import build_models, load_config
from orchestrator.parallel_default import DEFAULT_PARALLEL_CAP, KV_SHARE, choose_parallel


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
                                     "recurrent_bytes_per_sequence": None}
    assert model.launch.n_ctx == 600
