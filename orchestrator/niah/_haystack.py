"""Haystacks with one needle: deterministic filler, the needle at a depth, the question.

The conversation is a system message holding the text (a short preamble, the filler,
the needle sentence ``The secret number is NNNNNNN.`` at the depth) and a user
message asking for the number. Two kinds of filler:

- synthetic: sentences from a small seeded grammar (a harbour town's chronicle), the
  same on every machine and Python version (``random.Random`` seeded with a string);
- a corpus: the lines of a text file, or of every text file under a directory in
  path order (each preceded by a ``# file: <path>`` line), e.g. source code, which
  scores very differently from prose (``lucerna niah --filler-file orchestrator/``).

A case is sized to a target length in the model's tokens by counting (a callback
the runner supplies: the daemon's tokenizer or the server's count endpoint) and
rescaling the number of filler units until it lands just under the target.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Filler", "NiahCase", "build_case", "corpus_filler", "haystack_messages",
           "needle_found", "synthetic_filler"]

Messages = list[dict[str, Any]]
Counter = Callable[[Messages], Awaitable[int]]

_SUBJECTS = (
    "the harbour master", "a cooper", "the miller's daughter", "two fishermen", "the clerk",
    "an old sailmaker", "the schoolteacher", "a peddler from the hills", "the night watchman",
    "the baker", "a ferryman", "the town's only doctor", "three apprentices", "the widow Hale",
)
_VERBS = (
    "mended", "weighed", "painted", "counted", "carried", "sold", "inspected", "repaired",
    "stacked", "described", "ordered", "borrowed", "returned", "measured",
)
_OBJECTS = (
    "the salt barrels", "a torn net", "the chapel bell", "a crate of pears", "the tide tables",
    "the ledger", "a coil of tarred rope", "the lantern glass", "the east gate", "a sack of flour",
    "the weathervane", "a basket of eels", "the customs seals", "the mooring posts",
)
_PLACES = (
    "by the quay", "in the counting house", "behind the smithy", "at the fish market",
    "on the sea wall", "in the chapel yard", "near the ropewalk", "under the old bridge",
    "at the tavern door", "beside the dry dock",
)
_TIMES = (
    "before sunrise", "after the squall", "at midday", "late that evening", "in the fog",
    "on a cold morning", "at low tide", "just before supper", "when the bells rang",
)

# The haystack is the system message (a document) and the question the user's turn:
# the layout under which the embedded gemma3-270m, a base model behind the fallback
# template, answers rather than echoing the start of a long user message.
_PREAMBLE = "Here is a text. One sentence in it gives a secret number.\n\n"
_NEEDLE = "The secret number is {value}."
_QUESTION = "What is the secret number given in the text?"

_TEXT_SUFFIXES = frozenset({
    ".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json",
    ".c", ".cc", ".cpp", ".h", ".hpp", ".js", ".ts", ".go", ".rs", ".java", ".sh",
})
_SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", "build",
                        ".mypy_cache", ".ruff_cache", ".pytest_cache"})


@dataclass(frozen=True)
class Filler:
    """Filler as units (sentences or lines) and how they join."""

    name: str
    units: Sequence[str]
    separator: str

    def take(self, n: int) -> list[str]:
        """The first ``n`` units, cycling through the source when it is shorter."""
        if not self.units:
            raise ValueError(f"filler {self.name!r} is empty")
        return [self.units[i % len(self.units)] for i in range(n)]


def synthetic_filler(seed: str = "lucerna-niah", n_units: int = 20000) -> Filler:
    rng = random.Random(f"filler/{seed}")

    def sentence() -> str:
        text = (f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
                f"{rng.choice(_PLACES)} {rng.choice(_TIMES)}.")
        return text[0].upper() + text[1:]

    return Filler("synthetic", [sentence() for _ in range(n_units)], " ")


def corpus_filler(path: Path) -> Filler:
    """The lines of ``path``, or of every text file under it (path order)."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(
            p for p in path.rglob("*")
            if p.is_file() and p.suffix in _TEXT_SUFFIXES
            and not any(part in _SKIP_DIRS or part.startswith(".")
                        for part in p.relative_to(path).parts[:-1]))
    else:
        raise ValueError(f"--filler-file {path} is neither a file nor a directory")
    lines: list[str] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(files) > 1:
            lines.append(f"# file: {file.relative_to(path)}")
        lines.extend(line for line in text.splitlines() if line.strip())
    if not lines:
        raise ValueError(f"--filler-file {path} holds no readable text")
    return Filler(f"corpus:{path.name or path}", lines, "\n")


@dataclass(frozen=True)
class NiahCase:
    length: int
    """The target prompt length in the model's tokens."""
    depth: float
    """Where the needle sits in the filler: 0 = first, 1 = last."""
    value: str
    messages: Messages
    n_tokens: int
    """The prompt's real length (counted with the template applied)."""


def haystack_messages(filler: Filler, n_units: int, depth: float, value: str) -> Messages:
    """The conversation: ``n_units`` of filler with the needle at ``depth``, then the question."""
    units = filler.take(n_units)
    units.insert(round(depth * n_units), _NEEDLE.format(value=value))
    return [{"role": "system", "content": _PREAMBLE + filler.separator.join(units)},
            {"role": "user", "content": _QUESTION}]


async def build_case(filler: Filler, length: int, depth: float, count: Counter, *,
                     seed: str = "lucerna-niah") -> NiahCase:
    """The case of ``length`` tokens (just under) with the needle at ``depth``."""
    value = str(random.Random(f"needle/{seed}/{length}/{depth}").randrange(1_000_000, 10_000_000))
    probe = 64
    fixed = await count(haystack_messages(filler, 0, depth, value))
    probed = await count(haystack_messages(filler, probe, depth, value))
    per_unit = max(1.0, (probed - fixed) / probe)
    n_units = max(1, int((length - fixed) / per_unit))
    best: tuple[int, int] | None = None  # (n_units, n_tokens) of the longest fit so far
    for _ in range(6):
        n_tokens = await count(haystack_messages(filler, n_units, depth, value))
        if n_tokens <= length and (best is None or n_tokens > best[1]):
            best = (n_units, n_tokens)
        if length * 0.985 <= n_tokens <= length:
            break
        n_units = max(1, n_units + int((length - n_tokens) / per_unit) - (n_tokens > length))
    if best is None:
        raise ValueError(f"no haystack fits {length} tokens (the fixed text alone is {fixed})")
    return NiahCase(length, depth, value, haystack_messages(filler, best[0], depth, value), best[1])


def needle_found(answer: str, value: str) -> bool:
    """Whether ``answer`` gives the needle's number (grouped digits count: 4,729,105)."""
    return value in re.sub(r"(?<=\d)[ ,](?=\d)", "", answer)
