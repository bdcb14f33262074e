from __future__ import annotations

import pytest

from orchestrator.chat_template import FALLBACK_STOP, ChatTemplate, flatten_content
from orchestrator.errors import BadRequestError, ChatTemplateError

MESSAGES = [
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
