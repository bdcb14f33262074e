"""The coding agents users point at Lucerna: pinned, installed, configured.

- Codex CLI: npm ``@openai/codex`` 0.169.0, speaks ``/v1/responses``;
- Claude Code: npm ``@anthropic-ai/claude-code`` 2.1.328, speaks ``/v1/messages``;
- OpenCode: npm ``opencode-ai`` 1.18.33, speaks ``/v1/chat/completions``.

What the package offers:

- ``ensure_client`` installs one into ``<cache>/clients/<name>-<version>`` (npm, once);
- ``client_config`` is the one line (environment and arguments) that points it at a
  running Lucerna, from the server's ``GET /props``;
- ``cli``: ``lucerna clients`` prints those lines, ``lucerna clients install``
  installs the three. tests/clients runs exactly these installs and lines.
"""

from orchestrator.clients._config import KEY_FROM_SHELL, ClientConfig, client_config, context_note
from orchestrator.clients._install import (
    CLIENTS,
    ClientSpec,
    client_binary,
    client_named,
    ensure_client,
)

__all__ = [
    "CLIENTS",
    "KEY_FROM_SHELL",
    "ClientConfig",
    "ClientSpec",
    "client_binary",
    "client_config",
    "client_named",
    "context_note",
    "ensure_client",
]
