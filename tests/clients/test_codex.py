"""Codex CLI 0.169 (``codex exec``) drives Lucerna's ``/v1/responses``.

Codex offers no way to force a tool call (it always sends ``tool_choice: "auto"``), so
its tool round trip is left to the model, which the default one does not attempt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients._agents import assert_served_cleanly, run_agent
from tests.conftest import LucernaServer

pytestmark = [pytest.mark.clients, pytest.mark.slow]

TIMEOUT_S = 420.0


# Shorter than the prefill of Codex's 2.5k-token prompt on a CPU (seconds), and no
# retry: the turn completes only because the server's keep-alive events (repeated
# response.in_progress, every 0.25 s here) reset Codex's idle timer. With the default
# 15 s interval this run fails with "idle timeout waiting for SSE".
IDLE_TIMEOUT = ("-c", "model_providers.lucerna.stream_idle_timeout_ms=1000",
                "-c", "model_providers.lucerna.stream_max_retries=0")


def test_codex_exec_completes_a_turn(agent_server: LucernaServer, tmp_path: Path) -> None:
    run = run_agent("codex", agent_server, tmp_path,
                    [*IDLE_TIMEOUT, "exec", "--skip-git-repo-check", "Say hello."],
                    timeout_s=TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    assert run.stdout.strip(), run.describe()  # exec prints the last message on stdout
    requests = assert_served_cleanly(run, "/v1/responses")
    # Codex read Lucerna's catalog entry (context window, short instructions, no
    # apply_patch) instead of falling back to a frontier model's metadata.
    assert any(r.path == "/v1/models" and r.status == 200 for r in requests), run.describe()
    assert "Model metadata for" not in run.stderr, run.describe()
