"""The one line that points each coding agent at a running Lucerna.

Built from the server's ``GET /props`` (its models, context and output cap), so the
line states what the server really serves:

- Codex: a custom provider on ``/v1/responses`` given as ``-c`` overrides. Its
  ``auth`` command (which prints ``$LUCERNA_API_KEY``, or ``none``) is what makes
  Codex fetch ``/v1/models?client_version=...`` and so read Lucerna's catalog entry
  (the context window, short base instructions; api/model_info.py); a provider
  without one gets Codex's fallback metadata and its 17 kB system prompt.
- Claude Code: environment variables. ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` is how it
  learns the context of a model it does not know (it assumes 1M tokens otherwise,
  and never asks a gateway). ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` is the server's output
  cap: Claude Code otherwise asks for 32000 and, before sending anything, refuses a
  prompt that does not fit beside that many ("Prompt is too long") in any context
  under about 45k. Its auto-compaction triggers 13000 tokens before the window less
  the output; where that is below Claude Code's own prompt, compaction cannot help
  (it says so) yet runs after every reply, so the line turns it off
  (``DISABLE_AUTO_COMPACT``). Every model alias (haiku, sonnet, opus) maps to the
  served model, since Lucerna answers an unknown model name with 404.
- OpenCode: an ``@ai-sdk/openai-compatible`` provider in ``OPENCODE_CONFIG_CONTENT``,
  with the context and the output cap as the model's ``limit``.

``ClientConfig.env`` and ``.args`` are what the tests in tests/clients run; ``line``
renders them for a shell, the API key as a ``$LUCERNA_API_KEY`` reference.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.clients._install import ClientSpec, client_named

__all__ = ["KEY_FROM_SHELL", "ClientConfig", "client_config", "context_note"]

KEY_FROM_SHELL = "${LUCERNA_API_KEY:-none}"
"""The API key as the printed lines pass it: the variable when set, else any word."""

CLAUDE_AUTOCOMPACT_BUFFER = 13000
"""Claude Code 2.1 compacts once a conversation is this close to its window less the
output (its debug log: ``effectiveWindow=16320``, ``threshold 3320``)."""


@dataclass(frozen=True)
class ClientConfig:
    spec: ClientSpec
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    def line(self) -> str:
        words = [f"{name}={_shell_value(value)}" for name, value in self.env.items()]
        return " ".join([*words, self.spec.command, *map(shlex.quote, self.args)])


def _shell_value(value: str) -> str:
    return f'"{value}"' if value == KEY_FROM_SHELL else shlex.quote(value)


def client_config(name: str, base_url: str, props: Mapping[str, Any],
                  api_key: str = KEY_FROM_SHELL) -> ClientConfig:
    """How client ``name`` reaches the Lucerna at ``base_url`` (no ``/v1``) whose
    ``GET /props`` answered ``props``."""
    spec = client_named(name)
    base_url = base_url.rstrip("/")
    model = str(props["model_alias"])
    n_ctx = int(props["n_ctx"])
    cap = int(props["max_output_tokens"])
    if name == "codex":
        provider = (f'{{name="Lucerna", base_url="{base_url}/v1", wire_api="responses", '
                    f'auth={{command="sh", args=["-c", "echo {KEY_FROM_SHELL}"]}}}}')
        return ClientConfig(spec, args=("-m", model, "-c", "model_provider=lucerna",
                                        "-c", f"model_providers.lucerna={provider}"))
    if name == "claude-code":
        env = {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_AUTH_TOKEN": api_key,
            "ANTHROPIC_MODEL": model,
            **{f"ANTHROPIC_DEFAULT_{alias}_MODEL": model for alias in ("HAIKU", "SONNET",
                                                                      "OPUS")},
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(n_ctx),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(cap),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if n_ctx - cap - CLAUDE_AUTOCOMPACT_BUFFER <= spec.prompt_tokens:
            env["DISABLE_AUTO_COMPACT"] = "1"
        return ClientConfig(spec, env=env)
    assert name == "opencode"
    config = {
        "provider": {"lucerna": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Lucerna",
            "options": {"baseURL": f"{base_url}/v1", "apiKey": "{env:LUCERNA_API_KEY}"},
            "models": {model: {"name": model, "limit": {"context": n_ctx, "output": cap}}},
        }},
        "model": f"lucerna/{model}",
        "small_model": f"lucerna/{model}",
    }
    return ClientConfig(spec, env={"OPENCODE_CONFIG_CONTENT": json.dumps(
        config, separators=(",", ":"))})


def context_note(name: str, props: Mapping[str, Any]) -> str | None:
    """A warning when the served context cannot hold the agent's own prompt."""
    spec = client_named(name)
    need = spec.prompt_tokens + int(props["max_output_tokens"])
    n_ctx = int(props["n_ctx"])
    if n_ctx >= need:
        return None
    suggested = 1 << (2 * spec.prompt_tokens - 1).bit_length()  # room for a conversation
    return (f"{spec.title}'s own prompt and tools take about {spec.prompt_tokens} "
            f"tokens and a turn may add {props['max_output_tokens']}, but the context is "
            f"{n_ctx}: serve with --n-ctx {suggested} or more for it")

