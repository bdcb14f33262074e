"""One Lucerna on the default model for every agent in tests/clients.

Its context holds the largest agent prompt (Claude Code's, about 12k tokens) with room
for a tool round trip; its output cap keeps each turn of a weak model that never
stops on its own short, which is what the cap is for. Its keep-alive interval is
short, so that a test can give an agent an idle timeout shorter than the prefill.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

AGENT_N_CTX = 16384
AGENT_OUTPUT_CAP = 64
AGENT_KEEPALIVE_S = 0.25


@pytest.fixture(scope="package")
def agent_server(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    srv = LucernaServer(tmp_path_factory.mktemp("agents") / "serve.log", "--model", "default",
                        "--n-ctx", str(AGENT_N_CTX),
                        "--max-output-tokens", str(AGENT_OUTPUT_CAP),
                        "--keepalive-interval", str(AGENT_KEEPALIVE_S))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()
