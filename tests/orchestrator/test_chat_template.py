from __future__ import annotations

from typing import Any

import pytest

from orchestrator.chat_template import FALLBACK_STOP, ChatTemplate, flatten_content
from orchestrator.errors import BadRequestError, ChatTemplateError

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user",
     "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "lamp."}]},
]


def test_fallback_template_renders_the_documented_transcript() -> None:
    template = ChatTemplate.for_model(None, bos_token="<bos>", eos_token="<eos>")
    assert template.is_fallback
    assert template.stop_strings == FALLBACK_STOP
    assert template.render(MESSAGES) == (
        "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Name a lamp.\nAssistant:"
    )


def test_gguf_template_is_used_with_special_tokens() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    template = ChatTemplate.for_model(source, bos_token="<s>", eos_token="</s>")
    assert not template.is_fallback
    assert template.render(MESSAGES[1:2]) == "<s><|user|>Hi</s><|assistant|>"


def test_template_raise_exception_becomes_a_400() -> None:
    template = ChatTemplate.for_model("{{ raise_exception('roles must alternate') }}",
                                      bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        template.render(MESSAGES)


def test_sandbox_blocks_attribute_escapes() -> None:
    template = ChatTemplate.for_model("{{ ''.__class__.__mro__[1].__subclasses__() }}",
                                      bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError):
        template.render(MESSAGES)


def test_non_text_content_parts_are_refused() -> None:
    with pytest.raises(BadRequestError, match="image_url"):
        flatten_content([{"type": "image_url", "image_url": {"url": "x"}}])


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
]


def test_fallback_template_renders_tools_calls_and_results() -> None:
    template = ChatTemplate.for_model(None, bos_token="", eos_token="")
    assert template.render(TOOL_TURNS, tools=TOOLS) == (
        "Be brief.\n\n"
        "Tools:\n"
        '{"name": "get_weather", "description": "Weather for a city", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}\n'
        'To call a tool, reply with <tool_call>{"name": "<tool name>", "arguments": {...}}'
        "</tool_call>\n\n"
        "User: Weather in Paris?\n"
        'Assistant: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "</tool_call>\n"
        "Tool result (get_weather): 21 C\n"
        "Assistant:"
    )
    assert "\nTool result" in template.stop_strings


def test_gguf_templates_get_hf_tool_calls_with_dict_arguments() -> None:
    # The shape Qwen/Hermes templates iterate: tool_call.function.arguments | tojson.
    source = (
        "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
        "<tool_call>{{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
        "{% elif m.role == 'tool' %}[{{ m.name }}:{{ m.content }}]"
        "{% endif %}{% endfor %}{{ tools | length }}"
    )
    template = ChatTemplate.for_model(source, bos_token="", eos_token="")
    assert template.render(TOOL_TURNS, tools=TOOLS) == (
        '<tool_call>{"city": "Paris"}</tool_call>[get_weather:21 C]1')


def test_malformed_tool_calls_are_a_400() -> None:
    template = ChatTemplate.for_model(None, bos_token="", eos_token="")
    bad = [{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}]
    with pytest.raises(BadRequestError, match=r"function\.name"):
        template.render(bad)
