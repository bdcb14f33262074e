"""Salts: what makes every prompt of a cold phase new to every server.

Each request of a run gets a salt, a made-up word and a hex tag, on the first line
of its prompt (``salted``): the first line of the text for ``/v1/completions``, of the
first message for a chat. A salt is drawn per (arm, request key) from a generator seeded
with the run's ``--seed``, so the same command sends the same prompts, and a prompt is
distinct per repeat, per concurrency level and per server (the key names the first two,
the arm the third).

Distinct text is not enough: a prefix cache matches tokens, and two salts that open with
the same token ("7f3a", "7f9c") share that token and whatever follows it alike. So a
salt is kept only if its *first token* (in the served model's vocabulary, asked of the
running server's ``/tokenize``) opens no other salt of the run; otherwise the next
candidate is drawn. Any two prompts of a run then share exactly their fixed head (the
BOS token, the chat template's opening) and not one token more: whatever a server
reports as cached beyond that head, it read from an earlier request of the same key
(the warm phase does that on purpose).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace

from orchestrator.bench.prompts import Prompt

__all__ = ["SaltBook", "salted"]

FirstToken = Callable[[str], Awaitable[int]]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Past this many draws for one salt the vocabulary has no fresh first tokens to offer
# a word of this shape: a fault of the harness, not a figure.
_MAX_DRAWS = 400


def _candidate(rng: random.Random) -> str:
    """A made-up word (its first letters are what tokenizers split off first: random
    letters of either case reach thousands of distinct first tokens) and a hex tag."""
    word = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(4, 8)))
    if rng.random() < 0.5:
        word = word.capitalize()
    return f"{word}-{rng.getrandbits(32):08x}"


def salted(prompt: Prompt, salt: str) -> Prompt:
    """``prompt`` with ``salt`` as its first line (of the text, or of the first message)."""
    if prompt.messages:
        (role, content), *rest = prompt.messages
        return replace(prompt, messages=((role, f"{salt}\n{content}"), *rest))
    return replace(prompt, text=f"{salt}\n{prompt.text}")


class SaltBook:
    """The run's salts, per (arm, key), each opening with a token no other one opens with."""

    def __init__(self, seed: int, first_token: FirstToken) -> None:
        self._seed = seed
        self._first_token = first_token
        self._salts: dict[tuple[str, str], str] = {}
        self._openings: set[int] = set()

    async def fill(self, arms: Iterable[str], keys: Iterable[str]) -> None:
        """Draw a salt for every (arm, key) not drawn yet, in a fixed order."""
        for arm in sorted(set(arms)):
            for key in sorted(set(keys)):
                if (arm, key) not in self._salts:
                    self._salts[(arm, key)] = await self._draw(arm, key)

    async def _draw(self, arm: str, key: str) -> str:
        rng = random.Random(f"{self._seed}/{arm}/{key}")
        for _ in range(_MAX_DRAWS):
            salt = _candidate(rng)
            opening = await self._first_token(salt)
            if opening not in self._openings:
                self._openings.add(opening)
                return salt
        raise ValueError(f"no salt with a fresh first token after {_MAX_DRAWS} draws "
                           f"({arm}, {key}); {len(self._openings)} openings are taken")

    def salt(self, arm: str, key: str) -> str:
        try:
            return self._salts[(arm, key)]
        except KeyError:
            raise KeyError(f"no salt drawn for ({arm}, {key}); fill() it first") from None

    def for_arm(self, arm: str) -> Callable[[str], str]:
        return lambda key: self.salt(arm, key)

    @property
    def openings(self) -> frozenset[int]:
        return frozenset(self._openings)
