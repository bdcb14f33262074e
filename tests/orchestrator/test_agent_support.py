"""What coding agents need from the server, on one real server: ``GET /props``, the
``/v1/models`` catalog (OpenAI, Anthropic and Codex shapes in one body), the output cap,
keep-alive events during a long prefill, and the lines ``lucerna clients`` prints.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.clients import CLIENTS, client_config, context_note
from tests.conftest import LucernaServer

MODEL = "gemma3-270m"
N_CTX = 2048
CAP = 24
KEEPALIVE_S = 0.1
# About 1000 tokens: a prefill of a second or more on a CPU, many keep-alive intervals.
LONG_PROMPT = "The lamp is on the table. " * 150


@pytest.fixture(scope="module")
def agent_ready(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    srv = LucernaServer(tmp_path_factory.mktemp("agent-support") / "serve.log",
                        "--model", "default",
                        "--n-ctx", str(N_CTX), "--max-output-tokens", str(CAP),
                        "--keepalive-interval", str(KEEPALIVE_S))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def props_of(server: LucernaServer, **params: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}/props", params=params, timeout=10)


def test_props_reports_context_cap_and_keepalive(agent_ready: LucernaServer) -> None:
    props = props_of(agent_ready).json()
    assert props["model_alias"] == MODEL and props["models"] == [MODEL]
    assert (props["n_ctx"], props["max_output_tokens"]) == (N_CTX, CAP)
    assert props["max_output_tokens_source"] == "configured"
    assert props["default_generation_settings"]["params"]["n_predict"] == CAP
    assert props["keepalive_interval_s"] == KEEPALIVE_S
    assert props["state"] == "ready" and props["engine"]["backend"] == "cpu"
    assert props["chat_template"] and props["eos_token"]
    assert "/v1/responses" in props["capabilities"]["endpoints"]
    assert props_of(agent_ready, model=MODEL).json() == props
    missing = props_of(agent_ready, model="no-such-model")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_models_answers_openai_anthropic_and_codex(agent_ready: LucernaServer) -> None:
    openai_models = openai.OpenAI(base_url=f"{agent_ready.base_url}/v1", api_key="unused",
                                  max_retries=0).models.list()
    assert [m.id for m in openai_models] == [MODEL]
    anthropic_models = anthropic.Anthropic(base_url=agent_ready.base_url, api_key="unused",
                                           max_retries=0).models.list()
    assert [(m.id, m.type, m.display_name) for m in anthropic_models] == [
        (MODEL, "model", MODEL)]
    body = httpx.get(f"{agent_ready.base_url}/v1/models",
                     params={"client_version": "0.169.0"}).json()
    assert (body["data"][0]["max_input_tokens"], body["data"][0]["max_tokens"]) == (N_CTX, CAP)
    (codex,) = body["models"]
    assert codex["slug"] == MODEL and codex["context_window"] == N_CTX
    assert codex["shell_type"] == "shell_command" and codex["apply_patch_tool_type"] is None
    assert len(codex["base_instructions"]) < 1000  # not Codex's own 17 kB prompt


def completion(server: LucernaServer, max_tokens: int) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6,", "temperature": 0,
            "max_tokens": max_tokens}
    response = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("max_tokens", "tokens", "finish"), [
    (10_000, CAP, "stop"),      # more than the cap: clamped, and the cap ends the turn
    (CAP, CAP, "stop"),         # exactly the advertised cap: all the server allows
    (CAP - 14, CAP - 14, "length"),  # the request's own smaller limit is a length stop
])
def test_the_cap_clamps_whatever_a_request_asks(agent_ready: LucernaServer,
                                                max_tokens: int, tokens: int,
                                                finish: str) -> None:
    # Counting on from "6," a greedy base model never stops by itself this soon.
    reply = completion(agent_ready, max_tokens)
    assert reply["usage"]["completion_tokens"] == tokens
    assert reply["choices"][0]["finish_reason"] == finish


@pytest.mark.slow
def test_agents_huge_max_tokens_end_their_turn_at_the_cap(agent_ready: LucernaServer) -> None:
    # Streamed, as Claude Code asks (the SDK refuses so large a max_tokens otherwise). The
    # client is closed after: a pooled connection that served a stream holds up the
    # server's graceful shutdown for its whole drain timeout.
    with anthropic.Anthropic(base_url=agent_ready.base_url, api_key="unused",
                             max_retries=0) as client, client.messages.stream(
            model=MODEL, max_tokens=32000, extra_body={"temperature": 0},
            messages=[{"role": "user", "content": "Count to 100."}]) as stream:
        message = stream.get_final_message()
    # The cap, not the model, ended it: counting to 100 takes far more than CAP tokens.
    assert message.usage.output_tokens == CAP
    assert message.stop_reason == "end_turn"  # never max_tokens: Claude Code would re-ask
    # No limit at all (Codex sends none): the cap, not the context, bounds the turn.
    chat = openai.OpenAI(base_url=f"{agent_ready.base_url}/v1", api_key="unused",
                         max_retries=0).chat.completions.create(
        model=MODEL, temperature=0, messages=[{"role": "user", "content": "Count to 100."}])
    assert chat.usage is not None and chat.usage.completion_tokens == CAP
    assert chat.choices[0].finish_reason == "stop"


def sse_events(server: LucernaServer, path: str, body: dict[str, Any]) -> list[str]:
    """The raw SSE blocks of one streamed request."""
    with httpx.stream("POST", f"{server.base_url}{path}", json={**body, "stream": True},
                      timeout=120) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    return [block for block in text.split("\n\n") if block.strip()]


def test_keepalive_during_a_long_prefill_in_each_dialect(agent_ready: LucernaServer) -> None:
    # Each dialect's prompt starts differently: the prefix cache would otherwise restore
    # the first one's prefill for the next, and there would be no long prefill to wait on.
    chat = sse_events(agent_ready, "/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2,
        "messages": [{"role": "user", "content": "Chat. " + LONG_PROMPT}]})
    # OpenAI clients skip comments; a chunk would reach users as an empty delta.
    assert chat.count(": keepalive") >= 2
    assert chat[-1] == "data: [DONE]"

    messages = sse_events(agent_ready, "/v1/messages", {
        "model": MODEL, "max_tokens": 2,
        "messages": [{"role": "user", "content": "Messages. " + LONG_PROMPT}]})
    kinds = [block.split("\n")[0] for block in messages]
    assert kinds[0] == "event: message_start" and kinds[-1] == "event: message_stop"
    assert kinds.count("event: ping") >= 3  # Anthropic's own keep-alive event

    responses = sse_events(agent_ready, "/v1/responses", {
        "model": MODEL, "max_output_tokens": 2, "input": "Responses. " + LONG_PROMPT})
    events = [json.loads(block.split("data: ", 1)[1]) for block in responses]
    # Real events (Codex's idle timer ignores comments): the same response, in order.
    progress = [e for e in events if e["type"] == "response.in_progress"]
    assert len(progress) >= 3
    assert {e["response"]["id"] for e in progress} == {events[0]["response"]["id"]}
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
    assert events[-1]["type"] == "response.incomplete"  # its own max_output_tokens


def test_lucerna_clients_prints_a_line_per_agent(agent_ready: LucernaServer) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "clients", "--url", agent_ready.base_url],
        capture_output=True, text=True, cwd=repo_root(), timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().split("\n")
    assert len(lines) == 2 * len(CLIENTS)
    props = props_of(agent_ready).json()
    for spec, comment, line in zip(CLIENTS, lines[::2], lines[1::2], strict=True):
        assert comment.startswith(f"# {spec.title} {spec.version} ({spec.endpoint})")
        words = shlex.split(line)
        command = words.index(spec.command)
        env = dict(word.split("=", 1) for word in words[:command])
        expected = client_config(spec.name, agent_ready.base_url, props)
        assert env == dict(expected.env)  # the key stays a ${LUCERNA_API_KEY:-none} for the shell
        assert tuple(words[command + 1:]) == expected.args
    # 2048 tokens hold none of the agents' own prompts: each gets a note on stderr.
    assert result.stderr.count("serve with --n-ctx") == len(CLIENTS)


def test_claude_code_keeps_auto_compaction_where_it_can_help() -> None:
    small = {"model_alias": MODEL, "n_ctx": 16384, "max_output_tokens": 64}
    large = {"model_alias": MODEL, "n_ctx": 131072, "max_output_tokens": 8192}
    url = "http://127.0.0.1:8080"
    assert client_config("claude-code", url, small).env["DISABLE_AUTO_COMPACT"] == "1"
    assert "DISABLE_AUTO_COMPACT" not in client_config("claude-code", url, large).env
    assert context_note("claude-code", large) is None
    assert context_note("claude-code", small) is None  # 12k prompt + 64 fit in 16k
