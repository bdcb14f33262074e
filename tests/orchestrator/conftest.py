"""Fixtures shared by the PFlash tests (test_prefill, test_niah): one compressing server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
def prefill_server(native, default_model, tmp_path_factory) -> Iterator[LucernaServer]:  # type: ignore[no-untyped-def]
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
