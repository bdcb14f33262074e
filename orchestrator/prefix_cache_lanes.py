"""What each of a daemon's sequences holds, as the prefix cache knows it, and which free
sequence a prompt runs on.

A ``--parallel N`` daemon keeps, in each of its N sequences, the state of the last
generation that ran there (PROTOCOL.md 9: its own live sequence and checkpoints), and a
``generate`` on sequence S reuses what S holds, a snapshot slot, or a prefix another
sequence holds (9.7), whichever is longest. The front end picks S, so it picks the one
that holds this conversation: an agent's next turn then finds its whole history where it
left it, with nothing copied. A one-sequence daemon has one lane, 0.

This index is advice, never a promise: the daemon may have dropped an idle sequence's
state (preemption, 9.6) or a cancelled generation may have decoded tokens never seen
here. Every decision taken on it only chooses what to copy or where to run; the daemon
checks the tokens itself, so a stale lane costs a miss, never a wrong state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Lane", "Lanes", "common_prefix_tokens"]


@dataclass
class Lane:
    """One daemon sequence."""

    tokens: bytes = b""
    """What it holds at most (int32 LE): the last generation's prompt and generated
    tokens, or, while a generation runs there, its prompt (it holds a prefix of them)."""
    prompt: int = 0
    """Tokens of that generation's prompt."""
    saved: bool = False
    """Its state is already in a snapshot slot: a later request need not copy it again."""
    last_used: float = 0.0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens) // 4

    def hold(self, tokens: bytes, prompt: int) -> None:
        """A generation with this prompt (and these generated tokens) ran here."""
        self.tokens, self.prompt, self.saved = tokens, prompt, False
        self.last_used = time.monotonic()

    def continued_by(self, wanted: bytes) -> bool:
        """``wanted`` goes on from this lane's last prompt (whatever it makes of the
        reply): the same conversation, which the daemon's own checkpoints serve."""
        return bool(self.tokens) and common_prefix_tokens(self.tokens, wanted) >= self.prompt


class Lanes:
    """The lanes of one daemon, by sequence number."""

    def __init__(self) -> None:
        self._lanes: dict[int, Lane] = {}

    def __getitem__(self, seq: int) -> Lane:
        return self._lanes.setdefault(seq, Lane())

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._lanes))

    def clear(self) -> None:
        self._lanes.clear()

    def longest_common(self, wanted: bytes) -> int:
        """The most tokens of ``wanted`` any sequence holds (what 9.7 can share)."""
        return max((common_prefix_tokens(lane.tokens, wanted) for lane in self._lanes.values()),
                   default=0)

    def choose(self, free: Sequence[int], wanted: bytes) -> int:
        """Which free sequence a prompt runs on: the one whose conversation it continues
        (the longest such), else an empty one (the prompt's shared part comes from the
        others, 9.7, so nothing is displaced), else the least recently used one (the
        prefix cache saves what it held first)."""
        same = [s for s in free if self[s].continued_by(wanted)]
        if same:
            return max(same, key=lambda s: common_prefix_tokens(self[s].tokens, wanted))
        empty = [s for s in free if not self[s].tokens]
        if empty:
            return empty[0]
        return min(free, key=lambda s: self[s].last_used)


def common_prefix_tokens(a: bytes, b: bytes) -> int:
    """Tokens two int32 strings share at their start."""
    n = min(len(a), len(b)) // 4
    lo, hi = 0, n
    # Binary search on whole-prefix equality: memcmp-fast even for long prompts.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * 4] == b[: mid * 4]:
            lo = mid
        else:
            hi = mid - 1
    return lo
