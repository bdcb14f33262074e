"""Claude Code 2.1 (``claude -p``) drives Lucerna's ``/v1/messages``.

Claude Code lets a test force a tool call: ``CLAUDE_CODE_EXTRA_BODY`` is merged into
every request body, so ``tool_choice`` names a tool and the server's grammar makes the
model call it. The tool is ToolSearch, which reads nothing outside Claude Code and
needs no permission. Because the body is the same on every request, the model is forced
again after the result; ``--max-turns 2`` ends the loop there, which Claude Code reports
as ``error_max_turns`` (exit 1) after the result has made its round trip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients._agents import AgentRun, assert_served_cleanly, run_agent, server_props
from tests.conftest import LucernaServer

pytestmark = [pytest.mark.clients, pytest.mark.slow]

TIMEOUT_S = 600.0
MODEL = "gemma3-270m"


def stream_messages(run: AgentRun) -> list[dict[str, Any]]:
    """``--output-format stream-json``: one JSON object per line."""
    try:
        return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not stream-json ({exc})\n{run.describe()}") from None


def test_claude_code_print_completes_a_turn(agent_server: LucernaServer,
                                             tmp_path: Path) -> None:
    run = run_agent("claude-code", agent_server, tmp_path,
                    ["-p", "Say hello.", "--output-format", "json"], timeout_s=TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    result = json.loads(run.stdout)
    assert (result["subtype"], result["is_error"], result["num_turns"]) == (
        "success", False, 1), run.describe()
    assert result["stop_reason"] == "end_turn", run.describe()  # the cap ends the turn
    assert result["result"].strip(), run.describe()
    # The context it planned with is the server's, not the 1M it assumes otherwise.
    n_ctx = server_props(agent_server)["n_ctx"]
    assert result["modelUsage"][MODEL]["contextWindow"] == n_ctx, run.describe()
    requests = assert_served_cleanly(run, "/v1/messages")
    # One reply, no re-asks ("Output token limit hit") nor compaction requests.
    assert sum(r.path == "/v1/messages" for r in requests) == 1, run.describe()


def test_claude_code_forced_tool_call_round_trips(agent_server: LucernaServer,
                                                   tmp_path: Path) -> None:
    force = {"tool_choice": {"type": "tool", "name": "ToolSearch"}, "temperature": 0}
    run = run_agent("claude-code", agent_server, tmp_path,
                    ["-p", "Find a tool that reads files.", "--output-format", "stream-json",
                     "--verbose", "--max-turns", "2"],
                    env={"CLAUDE_CODE_EXTRA_BODY": json.dumps(force)}, timeout_s=TIMEOUT_S)
    messages = stream_messages(run)
    assistant = [m["message"] for m in messages if m["type"] == "assistant"]
    results = [block for m in messages if m["type"] == "user"
               for block in m["message"]["content"] if block.get("type") == "tool_result"]
    assert len(assistant) == 2 and len(results) == 2, run.describe()
    call = assistant[0]["content"][-1]
    assert (call["type"], call["name"]) == ("tool_use", "ToolSearch"), run.describe()
    assert isinstance(call["input"].get("query"), str), run.describe()
    assert results[0]["tool_use_id"] == call["id"], run.describe()
    assert not results[0].get("is_error"), run.describe()
    # The second request carried the call and its result: a longer prompt, and answered.
    first, second = (m["usage"]["input_tokens"] for m in assistant)
    assert second > first, run.describe()
    assert assistant[1]["content"][-1]["type"] == "tool_use", run.describe()
    final = messages[-1]
    assert (final["type"], final["subtype"]) == ("result", "error_max_turns"), run.describe()
    assert run.returncode == 1, run.describe()
    requests = assert_served_cleanly(run, "/v1/messages")
    assert sum(r.path == "/v1/messages" for r in requests) == 2, run.describe()
