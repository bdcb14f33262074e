"""Fixtures shared by several test modules: one compressing server (test_prefill,
test_niah) and two models behind an API key (test_model_retrieval,
test_tokenize_endpoints)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemons.native import NativeBuild
from orchestrator.niah import haystack_messages, synthetic_filler
from tests.conftest import LucernaServer

# Compress (auto) only prompts of at least this many tokens, keeping 30 %.
PREFILL_THRESHOLD = 600
PREFILL_KEEP = 0.3
NEEDLE_VALUE = "4729105"


def long_messages() -> list[dict[str, object]]:
    """A NIAH conversation of about 900 of the default model's tokens: over the threshold."""
    return haystack_messages(synthetic_filler(), 56, 0.5, NEEDLE_VALUE)


@pytest.fixture(scope="session")
def prefill_server(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    """The default model with the default model as its PFlash drafter (two daemons)."""
    srv = LucernaServer(tmp_path_factory.mktemp("prefill") / "serve.log", "--model", "default",
                        "--n-ctx", "2048",
                        "--prefill-compression", "auto",
                        "--prefill-threshold", str(PREFILL_THRESHOLD),
                        "--prefill-keep", str(PREFILL_KEEP))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


# Two models behind an API key: the default gemma3-270m and the qwen3 test model under
# an id with a slash, as Hugging Face style ids have.
PAIR_KEY = "pair-key-0123"
PAIR_N_CTX = 1024
GEMMA, QWEN = "gemma3-270m", "test/qwen3"


@pytest.fixture(scope="session")
def keyed_pair(
    native: NativeBuild,
    default_model: Path,
    test_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("keyed_pair")
    (folder / "keys").write_text(f"{PAIR_KEY}\n")
    config = folder / "lucerna.toml"
    config.write_text(f"""
[server]
api_key_file = "keys"

[[models]]
name = "{GEMMA}"
path = "default"

[[models]]
name = "{QWEN}"
path = "{test_models['qwen3']}"
""")
    server = LucernaServer(folder / "serve.log", "--config", str(config), "--n-ctx",
                           str(PAIR_N_CTX))
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()
