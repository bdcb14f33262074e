"""The generation core's vocabulary: what a dialect asks for and what it gets back.

A dialect turns its request into a ``GenerationRequest`` (with the ``Conversation``
it was rendered from, for PFlash) and reads the core's ``Event``s back into its wire
shape; an ``OutputParser`` turns visible text into text and tool calls. This module
is a leaf: it names things and runs nothing, so everything that speaks events (the
dialects, tools, PFlash's proxy, metrics, the model's observers) imports it without
importing the loop that produces them (orchestrator/generation.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.reasoning import ReasoningPlan
from protocol import SamplingParams

__all__ = [
    "Conversation",
    "Event",
    "Finished",
    "GenerationRequest",
    "OutputParser",
    "PromptLogprobs",
    "ReasoningDelta",
    "Speculation",
    "TextDelta",
    "TokenLogprob",
    "ToolCall",
]
@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Text of the model's reasoning block (orchestrator/reasoning.py), tags removed."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, as text


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability and its most likely alternatives'
    (PROTOCOL.md 5.1), yielded before the text that token makes, only for a request
    that asked for them (``GenerationRequest.logprobs``). Tokens are their piece bytes
    as the model renders them; the dialects shape them as OpenAI does."""

    token: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...]


@dataclass(frozen=True)
class PromptLogprobs:
    """The prompt tokens' log-probabilities (``GenerationRequest.prompt_logprobs``),
    yielded once, before anything generated: one entry per prompt token after the
    first (nothing predicts the first), each with the request's ``logprobs`` K
    alternatives, from the same distribution as a generated token's."""

    entries: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding's counts for one generation (PROTOCOL.md 5.9)."""

    draft_steps: int
    """Verify steps that carried proposals."""
    proposed: int
    accepted: int
    method: str | None = None
    """The proposers that ran: ``dflash``, ``lookup``, ``dflash+lookup``... (the daemon's
    ``spec``); None from a daemon that does not say."""
    tree_steps: int | None = None
    """Of ``draft_steps``, those verified as a tree (``draft_tree``); None: chain verify."""

    @property
    def acceptance_length(self) -> float:
        """Mean tokens committed per verify step (accepted proposals plus one)."""
        return 1.0 + self.accepted / self.draft_steps if self.draft_steps else 0.0


@dataclass(frozen=True)
class Finished:
    finish_reason: str  # "stop" | "length" | "tool_calls"
    prompt_tokens: int
    completion_tokens: int
    prefill_ms: float
    decode_ms: float
    recoveries: int = 0
    stop_string: str | None = None  # the request's stop string that ended it, if one did
    # Prompt tokens PFlash compressed away before the prefill (prompt_tokens counts
    # what was prefilled); 0 when the prompt was not compressed (orchestrator/prefill).
    compressed_tokens: int = 0
    # Set when the daemon decoded speculatively (a draft is configured); summed over a
    # recovery's daemons would mislead, so it is the last daemon's reply.
    speculative: Speculation | None = None
    # The server's output cap ended it; reported as a stop (see ``cap_ends_turn``).
    capped: bool = False
    # Prompt tokens whose state came from the prefix cache instead of a prefill
    # (orchestrator/prefix_cache.py); reported as the dialects' cached-token fields.
    cached_tokens: int = 0
    # Generated tokens inside the reasoning block (part of completion_tokens).
    reasoning_tokens: int = 0


Event = TextDelta | ReasoningDelta | ToolCall | TokenLogprob | PromptLogprobs | Finished


class OutputParser(Protocol):
    """Turns the visible text of a generation into text and tool calls."""

    def feed(self, text: str) -> list[TextDelta | ToolCall]: ...

    def finish(self) -> list[TextDelta | ToolCall]: ...


@dataclass(frozen=True)
class Conversation:
    """The chat a prompt was rendered from: what PFlash compresses and proxy mode
    forwards (orchestrator/prefill). Messages in the shape the dialects hand to
    ``prompt_ids``; ``tools`` as the chat template gets them."""

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class GenerationRequest:
    prompt: list[int]
    max_tokens: int | None
    sampling: SamplingParams | None = None
    stop_strings: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF that constrains every sampled token
    # A JSON schema (as JSON text) the output must satisfy; the daemon turns it into a
    # grammar with the engine's own converter. Exclusive with ``grammar``.
    json_schema: str | None = None
    parser_factory: Callable[[], OutputParser] | None = field(default=None, compare=False)
    # False for raw prompts (legacy completions): no chat template, so none of its stops.
    template_stops: bool = True
    # Set by the chat dialects; None for raw prompts, which PFlash leaves alone.
    conversation: Conversation | None = field(default=None, compare=False)
    # Prompt tokens PFlash removed from ``prompt`` (orchestrator/prefill); reported in usage.
    compressed_tokens: int = 0
    # Positions in ``prompt`` the prefill splits at and the prefix cache keeps state at:
    # the end of the system part (``chat_prompt``), or of a compressed prompt.
    marks: tuple[int, ...] = ()
    # K: yield a TokenLogprob with the K most likely alternatives before each token's
    # text (0: the chosen token's alone); None: none.
    logprobs: int | None = None
    # With ``logprobs``: yield the prompt's as one PromptLogprobs before anything else
    # (legacy Completions echo); ``max_tokens`` may then be 0. Such a prefill reuses no
    # held state (PROTOCOL.md 5.1).
    prompt_logprobs: bool = False
    # Prompt lookup (PROTOCOL.md 5.9) on or off for this request; None: the model's
    # ``lookup`` setting. On needs a model whose setting is not "off".
    lookup: bool | None = None
    # A thinking model's reasoning block and budget (orchestrator/reasoning.py); None:
    # all output is answer.
    reasoning: ReasoningPlan | None = field(default=None, compare=False)
