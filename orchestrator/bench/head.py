"""The fixed head: the tokens every prompt of a run shares before its salt.

A salt opens the text of every prompt (``salt.py``), but some tokens come before any
text a client sends: the BOS a model asks for, and for a chat the template's opening
(``<|im_start|>system\\n``, a default system prompt). Those tokens are the same in
every request, a server may rightly keep them, and no salt can change them; a cold
request may therefore report at most this many cached tokens, and not one more.

The head is computed, not measured from a server's cache: the chat is rendered with the
model's template as the server reports it (``GET /props``: ``chat_template``,
``bos_token``, ``eos_token``, which both servers answer; the one template both are
given) by the same code Lucerna renders with, the text before the salt is tokenized by
the server (``POST /tokenize``), with a BOS unless the template wrote its own, as
Lucerna's and llama-server's tokenizers do. For ``/v1/completions`` the head is the
BOS alone, or nothing.
"""

from __future__ import annotations

from typing import Any

import httpx

from orchestrator.bench.client import Endpoint
from orchestrator.bench.prompts import Prompt
from orchestrator.chat_template import ChatTemplate

__all__ = ["shared_head"]


async def _tokens(client: httpx.AsyncClient, endpoint: Endpoint, text: str,
                  add_special: bool) -> list[int]:
    response = await client.post(endpoint.root_url + "/tokenize",
                                 json={"content": text, "add_special": add_special},
                                 headers=endpoint.headers())
    response.raise_for_status()
    return [int(t) for t in response.json()["tokens"]]


def _rendered(props: dict[str, Any], messages: tuple[tuple[str, str], ...]) -> str:
    template = ChatTemplate.for_model(props.get("chat_template"),
                                      bos_token=props.get("bos_token") or "",
                                      eos_token=props.get("eos_token") or "")
    return template.render([{"role": role, "content": content} for role, content in messages])


async def shared_head(client: httpx.AsyncClient, endpoint: Endpoint, probe: Prompt,
                      salt: str) -> int:
    """Tokens before ``salt`` in ``probe`` as the server will see it: its fixed head."""
    if probe.messages is None:
        with_bos = await _tokens(client, endpoint, salt, True)
        return len(with_bos) - len(await _tokens(client, endpoint, salt, False))
    response = await client.get(endpoint.root_url + "/props", headers=endpoint.headers())
    response.raise_for_status()
    props = response.json()
    text = _rendered(props, probe.messages)
    at = text.find(salt)
    if at < 0:
        raise ValueError("the rendered chat lost its salt; the template rewrote the first "
                         "message")
    head = text[:at]
    if not head:
        return len(await _tokens(client, endpoint, salt, True)) - len(
            await _tokens(client, endpoint, salt, False))
    bos = props.get("bos_token") or ""
    return len(await _tokens(client, endpoint, head, not (bos and head.startswith(bos))))
