"""OpenCode (``opencode run``) drives Lucerna's ``/v1/chat/completions`` through its
``@ai-sdk/openai-compatible`` provider.

OpenCode offers no way to force a tool call: it sends ``tool_choice: "auto"`` after
any model option, so its tool round trip is left to the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients._agents import assert_served_cleanly, received_requests, run_agent
from tests.conftest import LucernaServer

pytestmark = [pytest.mark.clients, pytest.mark.slow]

TIMEOUT_S = 420.0


def test_opencode_run_completes_a_turn(agent_server: LucernaServer, tmp_path: Path) -> None:
    run = run_agent("opencode", agent_server, tmp_path, ["run", "Say hello."],
                    timeout_s=TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    assert run.stdout.strip(), run.describe()
    assert_served_cleanly(run, "/v1/chat/completions")
    # The session title (its small model) and the answer: both asked of this server.
    # OpenCode exits once it printed the answer, and its title request may still be
    # streaming then: that one is logged as closed by the client.
    chats = [r for r in received_requests(run.server_log) if r.path == "/v1/chat/completions"]
    assert len(chats) >= 2 and all(r.user_agent.startswith("opencode/") for r in chats), (
        run.describe())
