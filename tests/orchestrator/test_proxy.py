"""PFlash proxy mode against a real upstream: a second Lucerna, with an API key.

The proxy runs only a drafter (the default model as a pflash daemon); chat requests in
any dialect are compressed when long, forwarded to the upstream's Chat Completions
endpoint with the bearer key and model name, and the answer comes back in the
caller's dialect, streaming included. Greedy answers through the proxy equal the
upstream's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam

from daemons.native import NativeBuild
from orchestrator.errors import UpstreamError
from orchestrator.events import Conversation, GenerationRequest
from orchestrator.niah import needle_found
from orchestrator.prefill import UpstreamSettings
from orchestrator.prefill._proxy import upstream_events
from tests.conftest import LucernaServer, free_port
from tests.orchestrator._dialogues import CHAT_TOOLS
from tests.orchestrator.conftest import NEEDLE_VALUE, long_messages

KEY = "upstream-secret"
UPSTREAM_MODEL = "gemma3-270m"
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "List three colours of the rainbow."}]


@pytest.fixture(scope="module")
def upstream(
    native: NativeBuild, default_model: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("upstream")
    keys = folder / "keys"
    keys.write_text(KEY + "\n")
    srv = LucernaServer(folder / "serve.log", "--model", "default",
                        "--n-ctx", "2048", "--api-key-file", str(keys))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def proxy(
    upstream: LucernaServer, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LucernaServer]:
    srv = LucernaServer(tmp_path_factory.mktemp("proxy") / "serve.log", "--model", "default",
                        "--n-ctx", "2048",
                        "--model-name", "proxied",
                        "--prefill-upstream", f"{upstream.base_url}/v1",
                        "--prefill-upstream-key", KEY,
                        "--prefill-upstream-model", UPSTREAM_MODEL,
                        "--prefill-compression", "auto", "--prefill-threshold", "600",
                        "--prefill-keep", "0.3")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def openai_client(server: LucernaServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)


@pytest.mark.slow
def test_answers_through_the_proxy_equal_the_upstreams_own(
        proxy: LucernaServer, upstream: LucernaServer) -> None:
    direct = openai_client(upstream, KEY).chat.completions.create(
        model=UPSTREAM_MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    assert "daemon" in proxy.log() and "pflash" in proxy.log()  # only a drafter runs here
    api = openai_client(proxy)
    response = api.chat.completions.create(
        model="proxied", messages=MESSAGES, max_tokens=16, temperature=0)
    assert response.model == "proxied"
    assert response.choices[0].message.content == direct.choices[0].message.content
    assert response.choices[0].finish_reason == direct.choices[0].finish_reason
    assert response.usage is not None and direct.usage is not None
    assert response.usage.prompt_tokens == direct.usage.prompt_tokens
    assert response.usage.completion_tokens == direct.usage.completion_tokens

    stream = api.chat.completions.create(
        model="proxied", messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == direct.choices[0].message.content
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == direct.usage.completion_tokens

    # The Anthropic dialect, through the same core: same upstream request, same text,
    # whole and streamed (its own event shapes, rebuilt from the upstream's chunks).
    # MESSAGES is typed for the openai SDK; the same dicts are valid Anthropic messages.
    claude = anthropic.Anthropic(base_url=proxy.base_url, api_key="unused", max_retries=0)
    message = claude.messages.create(model="proxied", messages=MESSAGES,  # type: ignore[arg-type]
                                     max_tokens=16, extra_body={"temperature": 0})
    assert "".join(b.text for b in message.content if b.type == "text") == (
        direct.choices[0].message.content)
    with claude.messages.stream(model="proxied", messages=MESSAGES,  # type: ignore[arg-type]
                                max_tokens=16, extra_body={"temperature": 0}) as events:
        streamed = "".join(events.text_stream)
        final = events.get_final_message()
    assert streamed == direct.choices[0].message.content
    assert final.usage.output_tokens == direct.usage.completion_tokens


@pytest.mark.slow
def test_long_prompts_are_compressed_before_they_are_forwarded(proxy: LucernaServer) -> None:
    messages = long_messages()
    # The proxy's drafter is the upstream's model: it counts the full prompt the same way.
    full = httpx.post(f"{proxy.base_url}/v1/messages/count_tokens", timeout=60, json={
        "model": "proxied", "messages": messages[1:], "system": messages[0]["content"]})
    full_tokens = full.json()["input_tokens"]
    response = openai_client(proxy).chat.completions.create(
        model="proxied", messages=messages, max_tokens=12, temperature=0)  # type: ignore[arg-type]
    assert response.usage is not None
    # prompt_tokens is the upstream's count of what it prefilled.
    assert response.usage.prompt_tokens < 0.5 * full_tokens
    details = response.usage.prompt_tokens_details
    assert details is not None and details.model_extra["compressed_tokens"] > 0  # type: ignore[index]
    answer = response.choices[0].message.content or ""
    assert needle_found(answer, NEEDLE_VALUE), answer
    # Streamed in the Responses dialect: the same compressed answer, the cut in the usage
    # of its final event.
    with httpx.stream("POST", f"{proxy.base_url}/v1/responses", timeout=300, json={
            "model": "proxied", "input": messages, "max_output_tokens": 12, "temperature": 0,
            "stream": True}) as stream:
        assert stream.status_code == 200
        events = [json.loads(line[6:]) for line in stream.iter_lines()
                  if line.startswith("data: ")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == answer
    usage = events[-1]["response"]["usage"]
    assert usage["input_tokens"] == response.usage.prompt_tokens
    assert usage["input_tokens_details"]["compressed_tokens"] == details.model_extra[
        "compressed_tokens"]  # type: ignore[index]


@pytest.mark.slow
def test_forced_tool_calls_and_refusals_pass_through(proxy: LucernaServer) -> None:
    response = openai_client(proxy).chat.completions.create(
        model="proxied", messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=CHAT_TOOLS, max_tokens=48, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    # A raw prompt has no conversation to forward.
    refused = httpx.post(f"{proxy.base_url}/v1/completions", timeout=60,
                         json={"model": "proxied", "prompt": "Hi", "max_tokens": 4})
    assert refused.status_code == 400 and "proxy" in refused.json()["error"]["message"]


@pytest.mark.slow
async def test_upstream_failures_are_bad_gateway(upstream: LucernaServer) -> None:
    request = GenerationRequest([1, 2], 4, conversation=Conversation(tuple(MESSAGES)))
    cases = [
        (UpstreamSettings(url=f"http://127.0.0.1:{free_port()}/v1"), "could not be reached"),
        (UpstreamSettings(url=f"{upstream.base_url}/v1", key="wrong"), "401"),
        (UpstreamSettings(url=f"{upstream.base_url}/v1", key=KEY, model="nope"), "404"),
    ]
    for settings, expected in cases:
        with pytest.raises(UpstreamError, match=expected) as failed:
            async for _ in upstream_events(settings, request, "proxied"):
                pass
        assert failed.value.status == 502


def test_logprobs_are_a_400_in_proxy_mode(proxy: LucernaServer) -> None:
    """The upstream generates and its chunks carry no logprobs: say so, do not drop them."""
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(proxy).chat.completions.create(
            model="proxied", messages=MESSAGES, max_tokens=4, logprobs=True)
    assert bad.value.param == "logprobs" and "gives no logprobs" in bad.value.message
