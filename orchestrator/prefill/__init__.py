"""PFlash speculative prefill: a small drafter compresses long prompts before the target.

The drafter (a pflash daemon) scores every prompt token by its attention (PROTOCOL.md
5.7) and keeps a fraction of them in order; the target then prefills only those.

- ``KeepRatioCurve``: how much to keep, flat or piecewise linear in the prompt length.
- ``PrefillSettings`` / ``PrefillOverrides``: the ``[models.prefill]`` table and the
  ``--prefill-*`` flags.
- ``compress_conversation``: the text round trip (drafter tokens, kept runs repaired
  to whole words, the user's last message re-appended when it lost over a fifth).
- ``drafter_turn``: park the target while the drafter scores, when both share a device.
- ``PrefillCompressor``: all of it inside the server, and proxy mode's forwarding.
"""

from __future__ import annotations

from orchestrator.prefill._build import build_compressor, is_proxy, served_path
from orchestrator.prefill._conversation import (
    CompressedConversation,
    CompressionSkipped,
    compress_conversation,
    drafter_turn,
)
from orchestrator.prefill._curve import KeepRatioCurve
from orchestrator.prefill._flags import add_prefill_arguments, prefill_overrides
from orchestrator.prefill._pipeline import KEEP_HEADER, MODE_HEADER, PrefillCompressor
from orchestrator.prefill._settings import (
    MODES,
    CompressOptions,
    PrefillOverrides,
    PrefillSettings,
    UpstreamSettings,
    parse_prefill_table,
)

__all__ = [
    "KEEP_HEADER",
    "MODES",
    "MODE_HEADER",
    "CompressOptions",
    "CompressedConversation",
    "CompressionSkipped",
    "KeepRatioCurve",
    "PrefillCompressor",
    "PrefillOverrides",
    "PrefillSettings",
    "UpstreamSettings",
    "add_prefill_arguments",
    "build_compressor",
    "compress_conversation",
    "drafter_turn",
    "is_proxy",
    "parse_prefill_table",
    "prefill_overrides",
    "served_path",
]
