"""What a fake daemon holds between commands: sequences, snapshot slots, snapshot files.

The model it stands for is attention-only (qwen3): a sequence's cache can be cut back to
any position, so a ``generate`` reuses the longest common prefix of its prompt with what
its own sequence holds, with a snapshot slot, or (protocol 2, one KV pool) with another
sequence (PROTOCOL.md 5.10, 9.7). Every reuse is recorded (``Decoded``), so a test sees
exactly what the prefix cache made the daemon skip.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from protocol import decode_token_bytes, encode_token_bytes

__all__ = ["BadSnapshotFile", "Decoded", "Held", "SlotState", "common_prefix"]

_MAGIC = b"LUCERNA-FAKE-SNAPSHOT\n"


class BadSnapshotFile(Exception):
    """``load_slot`` of a file that is missing, corrupt or another daemon identity's."""


@dataclass(frozen=True)
class SlotState:
    tokens: tuple[int, ...]
    host_bytes: int


@dataclass(frozen=True)
class Decoded:
    """One ``generate`` or ``restore`` that ran, as the daemon saw it."""

    command: str
    seq: int
    prompt: tuple[int, ...]
    reused: int
    """Prompt tokens taken from held state (``n_cached``, or a restore's ``n_reused``)."""
    cache_slot: int | None
    """The slot they came from (a restore's slot, or a generate's ``cache_slot``)."""
    snap: tuple[int, int] | None
    tokens: tuple[int, ...]
    finish: str

    @property
    def prefilled(self) -> int:
        """Prompt tokens the daemon computed."""
        return len(self.prompt) - self.reused


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Held:
    """Sequences and slots of one daemon."""

    n_seqs: int
    n_slots: int
    bytes_per_token: int
    share: bool
    """Sequences share prefixes in one KV pool (9.7); False with ``--kv-unified=off``."""
    live: list[tuple[int, ...]] = field(default_factory=list)
    """What each sequence holds: prompt and generated tokens but the last (5.5)."""
    slots: dict[int, SlotState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.live = [() for _ in range(self.n_seqs)]

    def reuse(self, seq: int, prompt: tuple[int, ...]) -> tuple[int, int | None]:
        """(tokens of ``prompt`` held, the slot they come from or None)."""
        own = common_prefix(self.live[seq], prompt)
        best, slot = own, None
        if self.share:
            for other, tokens in enumerate(self.live):
                if other != seq:
                    best = max(best, min(common_prefix(tokens, prompt), len(prompt) - 1))
        for number, held in sorted(self.slots.items()):
            shared = min(common_prefix(held.tokens, prompt), len(prompt) - 1)
            if shared > best:
                best, slot = shared, number
        return best, slot

    def snapshot(self, slot: int, tokens: tuple[int, ...]) -> SlotState:
        state = SlotState(tokens, len(tokens) * self.bytes_per_token)
        self.slots[slot] = state
        return state

    def save(self, slot: int, path: Path, state_id: str) -> int:
        """Write ``slot`` to ``path`` whole or not at all (5.10); the file's size."""
        body = _MAGIC + state_id.encode() + b"\n" + encode_token_bytes(self.slots[slot].tokens)
        data = body + hashlib.sha256(body).digest()[:8]
        partial = path.with_name(f"{path.name}.tmp-fake")
        partial.write_bytes(data)
        partial.rename(path)
        return len(data)

    def load(self, slot: int, path: Path, state_id: str) -> SlotState:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise BadSnapshotFile(f"{path} cannot be read: {exc.strerror}") from None
        body, check = data[:-8], data[-8:]
        if not body.startswith(_MAGIC) or hashlib.sha256(body).digest()[:8] != check:
            raise BadSnapshotFile(f"{path} is not a whole snapshot file")
        identity, _, tokens = body[len(_MAGIC):].partition(b"\n")
        if identity.decode() != state_id:
            raise BadSnapshotFile(f"{path} was taken by another model, engine or setting")
        return self.snapshot(slot, tuple(decode_token_bytes(tokens)))
