"""The OpenAI Chat Completions path, end to end: real server, real daemon, real model.

The official ``openai`` client is the oracle for wire shapes; greedy output through
HTTP is checked against the same generation driven directly over the daemon protocol.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
import trio
from openai.types.chat import ChatCompletionMessageParam

from daemons.client import open_daemon
from daemons.native import NativeBuild
from daemons.roles import DaemonLaunch, role_named
from orchestrator.chat_template import FALLBACK_STOP, ChatTemplate
from tests.conftest import LucernaServer
from tests.orchestrator._dialogues import TOO_LONG

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "List three colours of the rainbow."}]
N_TOKENS = 24


def client_for(server: LucernaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def direct_greedy_text(native: NativeBuild, model: Path, n_tokens: int) -> str:
    """The same request, driven straight over the daemon protocol (no HTTP, no server)."""

    async def run() -> str:
        launch = DaemonLaunch(role=role_named("qwen35"), executable=native.binary("qwen35"),
                              model=model, n_ctx=2048)
        async with open_daemon(launch) as daemon:
            table = await daemon.piece_table()
            bos = table.pieces[table.bos].decode()
            prompt_text = ChatTemplate.for_model(None, bos_token=bos, eos_token="").render(MESSAGES)
            ids = await daemon.tokenize(prompt_text)
            async with daemon.generate(ids, n_tokens) as stream:
                tokens = await stream.collect()
            return await daemon.detokenize(tokens)

    return trio.run(run)


@pytest.mark.slow
def test_greedy_over_http_equals_greedy_from_the_daemon(
    server: LucernaServer, native: NativeBuild, default_model: Path,
) -> None:
    expected = direct_greedy_text(native, default_model, N_TOKENS)
    cut = min((expected.find(s) for s in FALLBACK_STOP if s in expected), default=-1)
    response = client_for(server).chat.completions.create(
        model="gemma3-270m", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0)
    choice = response.choices[0]
    if cut >= 0:
        assert choice.message.content == expected[:cut]
        assert choice.finish_reason == "stop"
    else:
        assert choice.message.content == expected
        assert choice.finish_reason == "length"
        assert response.usage is not None and response.usage.completion_tokens == N_TOKENS
    assert choice.message.content  # the real model says something


@pytest.mark.slow
def test_stream_parses_with_the_openai_client_and_matches_non_stream(server: LucernaServer) -> None:
    client = client_for(server)
    plain = client.chat.completions.create(
        model="gemma3-270m", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0)

    chunks = list(client.chat.completions.create(
        model="gemma3-270m", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == plain.choices[0].finish_reason
    assert all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        plain.choices[0].message.content)

    # The stream helper accumulates deltas exactly as SDK users see them. (Its
    # get_final_completion() refuses finish_reason "length" by design, so read the
    # accumulated snapshot and the content.done event instead.)
    with client.chat.completions.stream(
        model="gemma3-270m", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0,
    ) as stream:
        done = [event.content for event in stream if event.type == "content.done"]
        snapshot = stream.current_completion_snapshot
    assert done == [plain.choices[0].message.content]
    assert snapshot.choices[0].message.content == plain.choices[0].message.content
    assert snapshot.choices[0].finish_reason == plain.choices[0].finish_reason


@pytest.mark.slow
def test_seeded_sampling_is_reproducible(server: LucernaServer) -> None:
    client = client_for(server)

    def sample(seed: int) -> str:
        r = client.chat.completions.create(model="gemma3-270m", messages=MESSAGES, max_tokens=16,
                                           temperature=1.0, seed=seed)
        return r.choices[0].message.content or ""

    assert sample(11) == sample(11)
    assert len({sample(s) for s in (1, 2, 3, 4)}) > 1


def test_stop_string_ends_generation(server: LucernaServer) -> None:
    client = client_for(server)
    base = client.chat.completions.create(model="gemma3-270m", messages=MESSAGES, max_tokens=16,
                                          temperature=0).choices[0].message.content or ""
    assert len(base) > 4
    stop = base[3:5]
    cut = client.chat.completions.create(model="gemma3-270m", messages=MESSAGES, max_tokens=16,
                                         temperature=0, stop=[stop]).choices[0]
    assert cut.message.content == base[: base.find(stop)]
    assert cut.finish_reason == "stop"


def test_models_and_health(server: LucernaServer) -> None:
    models = client_for(server).models.list()
    assert [m.id for m in models.data] == ["gemma3-270m"]
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["status"] == "ok"
    assert health["models"]["gemma3-270m"]["state"] == "ready"


def test_errors_have_the_openai_shape(server: LucernaServer) -> None:
    client = client_for(server)
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gemma3-270m", messages=[])
    long_prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": TOO_LONG}]
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(model="gemma3-270m", messages=long_prompt)
    assert too_long.value.code == "context_length_exceeded"
    raw = httpx.post(f"{server.base_url}/v1/chat/completions", content=b"{not json",
                     headers={"Content-Type": "application/json"})
    assert raw.status_code == 400
    assert raw.json()["error"]["type"] == "invalid_request_error"
