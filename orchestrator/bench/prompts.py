"""The fixed prompt sets of ``lucerna bench``.

``code``: ten code-completion prompts of our own, HumanEval-style (a signature and
a docstring with doctests; the model writes the body), stored as data in
``data/code_prompts.jsonl``. They are sent as raw prompts to ``/v1/completions``, so
every server sees the same text, tokenized by the same vocabulary, with no chat
template in between.

``long-4k`` .. ``long-128k``: one long-context prompt each, built by a seeded
generator from a small grammar of sentences (a lighthouse keeper's log, with one
"needle" fact in the middle and a question about it at the end). The text is the
same on every machine and Python version (``random.Random`` seeded with a string),
and sized by a calibrated tokens-per-sentence figure of the default model's
tokenizer to land within a few percent of its target; the report always shows the
real ``prompt_tokens`` the server counted. Targets leave room in a context of the
set's size (4096, 16384, ...) for a few hundred generated tokens.

``agent``: a coding agent's conversation of eight turns (``agent.py``), each request the
whole history so far, sent to ``/v1/chat/completions`` whatever ``--api`` says. Its
turns go in order, at concurrency 1 only; each repeat replays a new conversation (one
that shares no prefix with the others), and its warm-up is an unrelated short message
so that nothing of the trace is prefilled before its first turn.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from orchestrator.bench.agent import AGENT_N_CTX, WARMUP_MESSAGES, Messages, agent_conversation

__all__ = [
    "LONG_TARGETS",
    "SET_NAMES",
    "Prompt",
    "PromptSet",
    "agent_prompts",
    "code_prompts",
    "long_context_prompt",
    "prompt_set",
]


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    messages: Messages | None = None
    """A chat conversation: sent as these messages to /v1/chat/completions (``text`` is
    then unused)."""


@dataclass(frozen=True)
class PromptSet:
    name: str
    prompts: tuple[Prompt, ...]
    n_ctx: int
    """The context size this set is meant to run in (prompt plus generation)."""
    warmup: Prompt | None = None
    """The warm-up request's prompt; None: the set's first prompt."""
    replay: Callable[[int], tuple[Prompt, ...]] | None = None
    """For a conversation: ``replay(i)`` is its i-th replay (``prompts`` is the first).
    Its prompts are turns that build on each other: they run in order, once per repeat,
    at concurrency 1 only."""

    @property
    def warmup_prompt(self) -> Prompt:
        return self.warmup or self.prompts[0]


# Prompt tokens per set, and the context each is meant to fit.
LONG_TARGETS: dict[str, tuple[int, int]] = {
    "long-4k": (4_000, 4_096),
    "long-16k": (16_000, 16_384),
    "long-32k": (32_000, 32_768),
    "long-64k": (64_000, 65_536),
    "long-128k": (128_000, 131_072),
}
SET_NAMES = ("code", *LONG_TARGETS, "agent")
_CODE_N_CTX = 4_096

# Tokens per generated sentence (its share of the "Day N." headings included) under
# gemma3's tokenizer, measured by tokenizing the 4K..64K prompts on the engine; the
# fixed text (preamble, needle, question) is counted separately. Both land within
# 2% of every target (the qwen3 test model's tokenizer too).
_TOKENS_PER_SENTENCE = 16.38
_FIXED_TOKENS = 76


@cache
def code_prompts() -> tuple[Prompt, ...]:
    text = resources.files("orchestrator.bench").joinpath("data/code_prompts.jsonl").read_text(
        encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return tuple(Prompt(id=row["id"], text=row["prompt"]) for row in rows)


_SUBJECTS = (
    "the keeper", "a fisherman", "the ferry captain", "my assistant", "the harbor master",
    "a young sailor", "the cook", "an old trader", "the lamp inspector", "a traveling doctor",
    "the postman", "two children", "the mayor", "a stranger in a grey coat", "the pilot",
)
_VERBS = (
    "repaired", "carried", "painted", "counted", "inspected", "cleaned", "moved", "measured",
    "sold", "borrowed", "found", "lost", "described", "ordered", "checked",
)
_OBJECTS = (
    "the brass lens", "a coil of rope", "three barrels of oil", "the signal flags",
    "a crate of apples", "the logbook", "the iron stairs", "a broken oar", "the copper kettle",
    "the weather charts", "a bundle of letters", "the spare wicks", "the foghorn",
    "a basket of bread", "the storm shutters",
)
_PLACES = (
    "near the north pier", "in the lamp room", "behind the boathouse", "on the east cliff",
    "at the market", "by the old chapel", "in the cellar", "along the sea wall",
    "under the bridge", "beside the well", "on the ferry deck", "at the customs house",
)
_TIMES = (
    "before dawn", "after the storm", "at noon", "late in the evening", "during the fog",
    "on a cold morning", "while the tide was low", "just before supper", "at first light",
    "when the bells rang",
)

_PREAMBLE = (
    "Below is a long extract from the daily log of a lighthouse keeper. Read all of it "
    "carefully, then answer the question that follows it.\n\n"
)
_NEEDLE = "On that day the keeper wrote down the secret password, which is amber falcon 42."
_QUESTION = (
    "\n\nQuestion: According to the log, what is the secret password the keeper wrote "
    "down? Answer in a few words.\nAnswer:"
)


def _sentence(rng: random.Random) -> str:
    text = (f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
            f"{rng.choice(_PLACES)} {rng.choice(_TIMES)}.")
    return text[0].upper() + text[1:]


def long_context_prompt(target_tokens: int, *, seed: str = "lucerna-bench") -> str:
    """A log of ``target_tokens`` tokens (as gemma3 counts them, within a few percent).

    The same arguments always give the same text. The needle sits in the middle.
    """
    if target_tokens <= _FIXED_TOKENS:
        raise ValueError(f"target_tokens must exceed {_FIXED_TOKENS}, got {target_tokens}")
    rng = random.Random(f"{seed}/{target_tokens}")
    n_sentences = max(1, round((target_tokens - _FIXED_TOKENS) / _TOKENS_PER_SENTENCE))
    sentences = [_sentence(rng) for _ in range(n_sentences)]
    sentences.insert(n_sentences // 2, _NEEDLE)
    paragraphs = []
    day = 1
    i = 0
    while i < len(sentences):
        size = rng.randint(4, 8)
        paragraphs.append(f"Day {day}. " + " ".join(sentences[i:i + size]))
        i += size
        day += 1
    return _PREAMBLE + "\n\n".join(paragraphs) + _QUESTION


def agent_prompts(conversation: int = 1) -> tuple[Prompt, ...]:
    """The turns of the ``agent`` set's ``conversation``-th replay, with ids
    ``c<conversation>.t<turn>``."""
    return tuple(Prompt(f"c{conversation}.t{turn}", "", messages)
                 for turn, messages in enumerate(agent_conversation(conversation), 1))


def prompt_set(name: str) -> PromptSet:
    """The prompt set called ``name`` (one of ``SET_NAMES``)."""
    if name == "code":
        return PromptSet(name, code_prompts(), _CODE_N_CTX)
    if name == "agent":
        return PromptSet(name, agent_prompts(1), AGENT_N_CTX,
                         warmup=Prompt("warm-up", "", WARMUP_MESSAGES), replay=agent_prompts)
    if name in LONG_TARGETS:
        target, n_ctx = LONG_TARGETS[name]
        return PromptSet(name, (Prompt(name, long_context_prompt(target)),), n_ctx)
    raise ValueError(f"unknown prompt set {name!r}; choose from {', '.join(SET_NAMES)}")
