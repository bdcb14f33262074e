"""Thinking models: the reasoning block a chat template asks for, split from the answer.

A thinking model writes its reasoning between two tags before the answer (Qwen3 and
DeepSeek: ``<think>`` ... ``</think>``). Which tags is read from the model's chat
template (``ReasoningFormat.of``): a tag pair whose name speaks of thinking or
reasoning that the template writes both of; a template without one has no reasoning,
and its output is all answer. Whether the template has a switch (``enable_thinking``,
as Qwen3's) is read from it too.

``ReasoningSplitter`` turns the visible text of a generation into reasoning and answer,
whether the prompt already opened the block (Qwen3.5's generation prompt ends with
``<think>``) or the model opens it first thing. ``ReasoningControl`` is what a request
asks for (the dialects' ``reasoning_effort``, ``reasoning.effort``, ``thinking``), with
the effort levels mapped to token budgets (``EFFORT_BUDGETS``); the generation core
enforces a budget by closing the block once that many reasoning tokens were generated,
after which the model goes on to the answer.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "EFFORT_BUDGETS",
    "ReasoningControl",
    "ReasoningFormat",
    "ReasoningPlan",
    "ReasoningSplitter",
    "thinking_signature",
]

EFFORT_BUDGETS: dict[str, int | None] = {
    "none": 0,
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": None,  # no budget: until the model closes the block (or the output cap)
}
"""Reasoning tokens allowed per effort level (OpenAI's ``reasoning_effort`` and
``reasoning.effort``); ``none`` turns reasoning off."""

_TAG = re.compile(r"<([A-Za-z_:]*(?:think|reason)[A-Za-z_:]*)>")
_SWITCHES = ("enable_thinking", "thinking")


@dataclass(frozen=True)
class ReasoningFormat:
    """The reasoning block of one chat template."""

    open: str
    close: str
    switch: str | None
    """The template variable that turns thinking off (``enable_thinking``), if any."""

    @classmethod
    @functools.lru_cache(maxsize=16)
    def of(cls, template: str) -> ReasoningFormat | None:
        for match in _TAG.finditer(template):
            name = match.group(1)
            if f"</{name}>" in template:
                switch = next((s for s in _SWITCHES
                               if re.search(rf"\b{s}\b(?!_)", template)), None)
                return cls(f"<{name}>", f"</{name}>", switch)
        return None

    def starts_inside(self, prompt_text: str) -> bool:
        """Whether the rendered prompt leaves the block open for the model to fill."""
        at = prompt_text.rfind(self.open)
        return at >= 0 and prompt_text.find(self.close, at) < 0


@dataclass(frozen=True)
class ReasoningControl:
    """What a request asks of reasoning; None fields leave the model's default."""

    enabled: bool | None = None
    budget: int | None = None

    @classmethod
    def from_effort(cls, effort: str) -> ReasoningControl:
        budget = EFFORT_BUDGETS[effort]
        if budget == 0:
            return cls(enabled=False)
        return cls(enabled=True, budget=budget)

    def over(self, default: ReasoningControl) -> ReasoningControl:
        """This request's control, the model's default where it says nothing."""
        enabled = self.enabled if self.enabled is not None else default.enabled
        budget = self.budget if self.budget is not None else default.budget
        return ReasoningControl(enabled, budget)


@dataclass(frozen=True)
class ReasoningPlan:
    """One generation's reasoning: the tags, where the output starts, the budget."""

    format: ReasoningFormat
    inside: bool
    """The prompt opened the block: the output starts as reasoning."""
    budget: int | None
    """Reasoning tokens before the core closes the block; None: no limit."""


class ReasoningSplitter:
    """Splits visible text into ``(is_reasoning, text)`` pieces, tags removed.

    Text that may be the start of a tag is held back until the next piece decides.
    Outside the block, only leading whitespace may come before the opening tag; any
    other text means the model answered without reasoning.
    """

    def __init__(self, plan: ReasoningPlan) -> None:
        self.format = plan.format
        self.state = "reasoning" if plan.inside else "before"
        self._held = ""
        self._after_tag = plan.inside  # newlines right after a tag are the template's

    @property
    def reasoning(self) -> bool:
        return self.state == "reasoning"

    def feed(self, text: str) -> list[tuple[bool, str]]:
        out: list[tuple[bool, str]] = []
        self._held += text
        while self._held:
            if self._after_tag and self.state != "before":
                self._held = self._held.lstrip("\n")
                if not self._held:
                    break
                self._after_tag = False
            held = self._held
            if self.state == "answer":
                out.append((False, held))
                self._held = ""
            elif self.state == "before":
                stripped = held.lstrip()
                if not stripped:
                    break  # only whitespace so far
                if stripped.startswith(self.format.open):
                    self._held = stripped[len(self.format.open):]
                    self.state, self._after_tag = "reasoning", True
                elif self.format.open.startswith(stripped):
                    break  # maybe the tag, cut short
                else:
                    self.state = "answer"
            else:  # reasoning
                at = held.find(self.format.close)
                if at >= 0:
                    out.append((True, held[:at].rstrip("\n")))  # as templates write it back
                    self._held = held[at + len(self.format.close):]
                    self.state, self._after_tag = "answer", True
                    continue
                keep = _partial_suffix(held, self.format.close)
                # Newlines stay held too: the ones right before the closing tag are not
                # part of the reasoning.
                keep += len(held[:len(held) - keep]) - len(held[:len(held) - keep].rstrip("\n"))
                if len(held) > keep:
                    out.append((True, held[:len(held) - keep]))
                self._held = held[len(held) - keep:]
                break
        return _merge(out)

    def finish(self) -> list[tuple[bool, str]]:
        held, self._held = self._held, ""
        if not held:
            return []
        if self.state == "before" and not held.strip():
            return []
        return [(self.state == "reasoning", held)]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def _merge(pieces: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    merged: list[tuple[bool, str]] = []
    for kind, text in pieces:
        if not text:
            continue
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def thinking_signature(model: str, thinking: str) -> str:
    """The ``signature`` of an Anthropic ``thinking`` block: a digest of the model and the
    text, so a client can send the block back unchanged (we do not verify it)."""
    return hashlib.sha256(f"{model}\0{thinking}".encode()).hexdigest()
