"""Thinking models (orchestrator/reasoning.py): the reasoning block split from the answer
in all three dialects, budgets enforced in decoding, effort levels, the template's
switch, and earlier reasoning written back as the template wants.

The model is the qwen3 test model (random weights, the real Qwen tokenizer) served with
the real chat template of Qwen3.5-4B from the engine's sources (``chat_template_file``):
its generation prompt opens ``<think>``, it has ``enable_thinking``, and it writes an
assistant turn's ``reasoning_content`` back after the last user message. Random weights
never close the block on their own, so every reasoning block here ends at its budget,
which is what the tests measure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from daemons.engine import ensure_engine_source
from daemons.native import NativeBuild
from orchestrator.reasoning import (
    EFFORT_BUDGETS,
    ReasoningFormat,
    ReasoningPlan,
    ReasoningSplitter,
)
from tests.conftest import LucernaServer, openai_chunks

TEMPLATES = "models/templates"
HI = [{"role": "user", "content": "hi"}]
BUDGET = 6  # the "think6" model's configured default


def template(name: str) -> str:
    return (ensure_engine_source(progress=lambda message: None) / TEMPLATES / name).read_text()


def test_the_block_is_read_from_the_template() -> None:
    qwen35 = ReasoningFormat.of(template("Qwen3.5-4B.jinja"))
    assert qwen35 == ReasoningFormat("<think>", "</think>", "enable_thinking")
    assert qwen35.starts_inside("<|im_start|>assistant\n<think>\n")
    assert not qwen35.starts_inside("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    qwen3 = ReasoningFormat.of(template("Qwen-Qwen3-0.6B.jinja"))
    assert qwen3 is not None and qwen3.switch == "enable_thinking"
    assert ReasoningFormat.of(template("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")) \
        == ReasoningFormat("<think>", "</think>", None)
    assert ReasoningFormat.of(template("Qwen-Qwen2.5-7B-Instruct.jinja")) is None


@pytest.mark.parametrize("inside", [True, False])
def test_the_splitter_gives_the_same_pieces_however_the_text_is_cut(inside: bool) -> None:
    form = ReasoningFormat("<think>", "</think>", None)
    text = ("" if inside else "\n<think>\n") + "weigh it\nup\n\n</think>\n\nThe answer."

    def split(chunks: list[str]) -> tuple[str, str]:
        splitter = ReasoningSplitter(ReasoningPlan(form, inside, None))
        pieces = [p for chunk in chunks for p in splitter.feed(chunk)] + splitter.finish()
        return ("".join(t for r, t in pieces if r), "".join(t for r, t in pieces if not r))

    whole = split([text])
    assert whole == ("weigh it\nup", "The answer.")
    assert split(list(text)) == whole
    assert split([text[:3], text[3:12], text[12:]]) == whole
    plain = ReasoningSplitter(ReasoningPlan(form, False, None))
    assert plain.feed("No block here") + plain.finish() == [(False, "No block here")]


@pytest.fixture(scope="module")
def server(native: NativeBuild, test_models: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    folder = tmp_path_factory.mktemp("reasoning")
    jinja = ensure_engine_source(progress=lambda message: None) / TEMPLATES / "Qwen3.5-4B.jinja"
    config = folder / "lucerna.toml"
    config.write_text(f"""
[[models]]
name = "think"
path = "{test_models['qwen3']}"
chat_template_file = "{jinja}"

[[models]]
name = "think6"
path = "{test_models['qwen3']}"
chat_template_file = "{jinja}"
reasoning_budget = {BUDGET}
""")
    srv = LucernaServer(folder / "serve.log", "--config", str(config), "--n-ctx", "2048",
                        "--threads", "1")
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def chat(server: LucernaServer, **body: Any) -> dict[str, Any]:
    body = {"model": "think6", "messages": HI, "max_tokens": 20, "temperature": 0, **body}
    reply = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def test_chat_splits_reasoning_and_the_budget_closes_it(server: LucernaServer) -> None:
    reply = chat(server)
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]  # the answer follows
    usage = reply["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == BUDGET
    assert usage["completion_tokens"] == 20
    # Streamed: the same reasoning, then the same answer, as deltas.
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", timeout=120, json={
            "model": "think6", "messages": HI, "max_tokens": 20, "temperature": 0,
            "stream": True}) as response:
        deltas = [c["choices"][0]["delta"] for c in openai_chunks(response) if c["choices"]]
    reasoning = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
    content = [d["content"] for d in deltas if d.get("content")]
    assert "".join(reasoning) == message["reasoning_content"]
    assert "".join(content) == message["content"]
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning_content" not in d for d in deltas[first_content:])


def test_effort_levels_map_to_their_budgets(server: LucernaServer) -> None:
    assert EFFORT_BUDGETS["minimal"] == 256
    minimal = chat(server, model="think", reasoning_effort="minimal", max_tokens=280)
    assert minimal["usage"]["completion_tokens_details"]["reasoning_tokens"] == 256
    assert minimal["choices"][0]["message"]["content"], minimal
    low = chat(server, reasoning_effort="low")  # 1024 over think6's own 6
    assert low["usage"]["completion_tokens_details"]["reasoning_tokens"] == 20
    assert "content" in low["choices"][0]["message"] and not low["choices"][0]["message"][
        "content"]
    off = chat(server, reasoning_effort="none")  # the template's enable_thinking=false
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert "reasoning_content" not in off["choices"][0]["message"]
    # The switch wrote the empty block into the prompt: <think>\n\n</think>\n\n.
    assert off["usage"]["prompt_tokens"] > low["usage"]["prompt_tokens"]
    bad = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=30, json={
        "model": "think", "messages": HI, "reasoning_effort": "huge"})
    assert bad.status_code == 400 and "reasoning_effort" in bad.text


def test_responses_has_a_reasoning_item_and_summary_events(server: LucernaServer) -> None:
    body = {"model": "think6", "input": "hi", "max_output_tokens": 20, "temperature": 0}
    reply = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=120).json()
    kinds = [item["type"] for item in reply["output"]]
    assert kinds == ["reasoning", "message"]
    summary = reply["output"][0]["summary"]
    assert summary[0]["type"] == "summary_text" and summary[0]["text"]
    assert reply["usage"]["output_tokens_details"]["reasoning_tokens"] == BUDGET
    with httpx.stream("POST", f"{server.base_url}/v1/responses", timeout=120,
                      json={**body, "stream": True}) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: ")]
    order = [e["type"] for e in events]
    reasoning_deltas = [e["delta"] for e in events
                        if e["type"] == "response.reasoning_summary_text.delta"]
    assert "".join(reasoning_deltas) == summary[0]["text"]
    first_text = order.index("response.output_text.delta")
    assert order.index("response.reasoning_summary_part.added") < first_text
    assert order.index("response.reasoning_summary_text.done") < first_text
    done = [e["item"]["type"] for e in events if e["type"] == "response.output_item.done"]
    assert done == ["reasoning", "message"]
    assert order[-1] == "response.incomplete"  # random weights never stop: cut at 20
    effort = httpx.post(f"{server.base_url}/v1/responses", timeout=120, json={
        **body, "model": "think", "reasoning": {"effort": "none"}}).json()
    assert [item["type"] for item in effort["output"]] == ["message"]


def test_anthropic_thinking_blocks_with_a_budget_and_a_signature(
        server: LucernaServer) -> None:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    ask: dict[str, Any] = {"model": "think", "max_tokens": 20, "messages": HI,
                           "extra_body": {"temperature": 0},
                           "thinking": {"type": "enabled", "budget_tokens": BUDGET}}
    reply = client.messages.create(**ask)
    assert [block.type for block in reply.content] == ["thinking", "text"]
    thinking, text = reply.content
    assert thinking.type == "thinking" and thinking.signature
    # The same prompt, greedy, closed after the same budget: exactly the reasoning and
    # the answer of the chat dialect on the model configured with that budget (whose
    # reasoning_tokens == BUDGET the chat test asserts).
    message = chat(server)["choices"][0]["message"]
    assert text.type == "text"
    assert (thinking.thinking, text.text) == (message["reasoning_content"], message["content"])
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0] == thinking  # the SDK put the deltas and the signature together
    off = client.messages.create(**{**ask, "thinking": {"type": "disabled"}})
    assert [block.type for block in off.content] == ["text"]


def test_earlier_reasoning_is_written_back_as_the_template_expects(
        server: LucernaServer) -> None:
    # Qwen3.5's template writes an assistant turn's reasoning back only after the last
    # user message (a tool-calling turn in progress); before it, it drops it.
    call = {"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{}"}}

    def prompt_tokens(messages: list[dict[str, Any]]) -> int:
        return int(chat(server, messages=messages, max_tokens=1)["usage"]["prompt_tokens"])

    turn: list[dict[str, Any]] = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call],
             "reasoning_content": "They want the weather; call the tool."},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    plain = [turn[0], {k: v for k, v in turn[1].items() if k != "reasoning_content"}, turn[2]]
    with_reasoning = prompt_tokens(turn)
    assert with_reasoning > prompt_tokens(plain)
    assert prompt_tokens([*turn, {"role": "assistant", "content": "Sunny."},
                          {"role": "user", "content": "thanks"}]) == prompt_tokens(
        [*plain, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "thanks"}])
    # The same history from the other dialects reaches the template the same way.
    claude = httpx.post(f"{server.base_url}/v1/messages", timeout=120, json={
        "model": "think6", "max_tokens": 1, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "They want the weather; call the tool.",
                 "signature": "x"},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}]}).json()
    usage = claude["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == with_reasoning
    responses = httpx.post(f"{server.base_url}/v1/responses", timeout=120, json={
        "model": "think6", "max_output_tokens": 1, "input": [
            {"role": "user", "content": "weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "They want the weather; call the tool."}]},
            {"type": "function_call", "call_id": "call_1", "name": "weather",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]}).json()
    assert responses["usage"]["input_tokens"] == with_reasoning


def test_a_model_without_a_block_is_all_answer(default_model: Path) -> None:
    # gemma3-270m has no template (the fallback), SmolLM2's ChatML has no block.
    from daemons.gguf_info import read_gguf_info

    assert read_gguf_info(default_model).chat_template is None
    assert ReasoningFormat.of("{{ '<|im_start|>assistant\\n' }}") is None


def test_a_forced_tool_call_skips_the_reasoning_block(server: LucernaServer) -> None:
    # A grammar constrains the output from its first token: the block is closed (by the
    # template's switch) so the call is the answer, not text inside the reasoning.
    tool = {"type": "function", "function": {"name": "units", "parameters": {
        "type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["unit"], "additionalProperties": False}}}
    reply = chat(server, model="think", tools=[tool], tool_choice="required", max_tokens=60)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "units"
    assert json.loads(call["function"]["arguments"])["unit"] in ("c", "f")
    assert "reasoning_content" not in choice["message"]
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
