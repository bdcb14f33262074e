"""Typed readings of the ``ok`` replies whose fields a client acts on (PROTOCOL.md 5).

Each ``from_reply`` checks the command word and that every field it needs is present
and well formed, and raises :class:`~protocol.MalformedLineError` otherwise; fields it
does not know are ignored, as the contract asks of clients.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import ClassVar, Self, TypeVar

from ._codes import FinishReason, ModelState
from ._replies import OkReply
from .errors import MalformedLineError

__all__ = [
    "CompressSummary",
    "EmbedSummary",
    "GenerateSummary",
    "ParkState",
    "SlotList",
    "SnapshotInfo",
]

_Enum = TypeVar("_Enum", bound=enum.StrEnum)
_SLOT_PAIR = re.compile(r"([0-9]+):([0-9]+)")


def _enum_field(reply: OkReply, key: str, kind: type[_Enum]) -> _Enum:
    raw = reply._required(key)
    try:
        return kind(raw)
    except ValueError:
        raise MalformedLineError(
            f"{key}={raw!r} is not one of {', '.join(kind)}", line=reply._line()
        ) from None


def _optional_int_field(reply: OkReply, key: str) -> int | None:
    return reply.int_field(key) if key in reply.fields else None


class _Summary:
    """Reads ``ok <command>`` into the fields of a subclass; unknown fields are ignored."""

    __slots__ = ()

    commands: ClassVar[tuple[str, ...]]
    """The command words whose replies this reads."""

    @classmethod
    def from_reply(cls, reply: OkReply) -> Self:
        """Read the reply.

        Raises:
            MalformedLineError: a reply to another command, or a field missing or malformed.
        """
        if reply.command not in cls.commands:
            wanted = " or ".join(f"'ok {c}'" for c in cls.commands)
            raise MalformedLineError(f"expected an {wanted} reply", line=reply._line())
        return cls._read(reply)

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class GenerateSummary(_Summary):
    """The fields of ``ok generate`` (section 5.1) and ``ok restore`` (section 5.5).

    ``n_reused`` (tokens taken from the slot) is set for a ``restore`` and None for a
    ``generate``; ``n_cached`` (prompt tokens a ``generate`` took from state the daemon
    held, section 5.10) for a ``generate``, with ``cache_slot`` when they came from a
    slot; ``snap_slot``/``snap_pos`` are set when the command asked for
    ``snap=L:S``. The ``draft_*`` fields (section 5.9) are set when the request decoded
    speculatively, and None otherwise.
    """

    n_prompt: int
    n_gen: int
    finish: FinishReason
    prefill_ms: float
    decode_ms: float
    n_reused: int | None = None
    n_cached: int | None = None
    cache_slot: int | None = None
    snap_slot: int | None = None
    snap_pos: int | None = None
    draft_steps: int | None = None
    """Verify steps that carried proposals."""
    draft_proposed: int | None = None
    draft_accepted: int | None = None
    """Proposals the target agreed with (and committed)."""
    draft_ms: float | None = None
    """Time spent in the draft model (feature ingest and block denoising)."""
    spec: str | None = None
    """The proposers the request ran (section 5.9): ``dflash``, ``oracle`` and ``lookup``
    joined by ``+``, or ``none``; None from a daemon that does not say."""
    tree_steps: int | None = None
    """Of ``draft_steps``, those verified as a tree (``--draft-tree``, 5.9); None where
    the request's proposals were not verified as trees."""

    @property
    def acceptance_length(self) -> float | None:
        """Mean tokens committed per verify step: accepted proposals plus the target's
        own pick; None without speculation, 0.0 when no step ran."""
        if self.draft_steps is None or self.draft_accepted is None:
            return None
        if self.draft_steps == 0:
            return 0.0
        return 1.0 + self.draft_accepted / self.draft_steps

    @property
    def prompt_tokens_reused(self) -> int:
        """Prompt tokens that were not prefilled: a restore's slot, or a generate's cache."""
        return self.n_reused if self.n_reused is not None else (self.n_cached or 0)

    @property
    def command(self) -> str:
        """The command this summarises: ``restore`` when it reused a slot, else ``generate``."""
        return "generate" if self.n_reused is None else "restore"

    commands: ClassVar[tuple[str, ...]] = ("generate", "restore")

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        # A restore must say n_reused; snap_slot and snap_pos come together or not at all.
        snap_slot = _optional_int_field(reply, "snap_slot")
        snap_pos = _optional_int_field(reply, "snap_pos")
        if (snap_slot is None) != (snap_pos is None):
            raise MalformedLineError("snap_slot= and snap_pos= go together", line=reply._line())
        draft_keys = ("draft_steps", "draft_proposed", "draft_accepted", "draft_ms")
        present = [key in reply.fields for key in draft_keys]
        if any(present) and not all(present):
            raise MalformedLineError(f"{', '.join(draft_keys)} go together", line=reply._line())
        speculative = all(present)
        generated = reply.command == "generate"
        return cls(
            n_prompt=reply.int_field("n_prompt"),
            n_gen=reply.int_field("n_gen"),
            finish=_enum_field(reply, "finish", FinishReason),
            prefill_ms=reply.float_field("prefill_ms"),
            decode_ms=reply.float_field("decode_ms"),
            n_reused=reply.int_field("n_reused") if reply.command == "restore" else None,
            n_cached=_optional_int_field(reply, "n_cached") if generated else None,
            cache_slot=_optional_int_field(reply, "cache_slot") if generated else None,
            snap_slot=snap_slot,
            snap_pos=snap_pos,
            draft_steps=reply.int_field("draft_steps") if speculative else None,
            draft_proposed=reply.int_field("draft_proposed") if speculative else None,
            draft_accepted=reply.int_field("draft_accepted") if speculative else None,
            draft_ms=reply.float_field("draft_ms") if speculative else None,
            spec=reply.fields.get("spec") if speculative else None,
            tree_steps=_optional_int_field(reply, "tree_steps") if speculative else None,
        )

    def to_reply(self) -> OkReply:
        """The ``ok generate`` (or ``ok restore``) reply that carries this summary."""
        fields = {"n_prompt": str(self.n_prompt)}
        if self.n_reused is not None:
            fields["n_reused"] = str(self.n_reused)
        if self.n_cached is not None and self.n_reused is None:
            fields["n_cached"] = str(self.n_cached)
            if self.cache_slot is not None:
                fields["cache_slot"] = str(self.cache_slot)
        fields |= {
            "n_gen": str(self.n_gen),
            "finish": str(self.finish),
            "prefill_ms": repr(float(self.prefill_ms)),
            "decode_ms": repr(float(self.decode_ms)),
        }
        if self.snap_slot is not None and self.snap_pos is not None:
            fields |= {"snap_slot": str(self.snap_slot), "snap_pos": str(self.snap_pos)}
        if (
            self.draft_steps is not None
            and self.draft_proposed is not None
            and self.draft_accepted is not None
            and self.draft_ms is not None
        ):
            if self.spec is not None:
                fields["spec"] = self.spec
            fields |= {
                "draft_steps": str(self.draft_steps),
                "draft_proposed": str(self.draft_proposed),
                "draft_accepted": str(self.draft_accepted),
                "draft_ms": repr(float(self.draft_ms)),
            }
            if self.tree_steps is not None:
                fields["tree_steps"] = str(self.tree_steps)
        return OkReply(self.command, fields)


@dataclass(frozen=True, slots=True)
class SnapshotInfo(_Summary):
    """``ok snapshot|load_slot slot=.. n_tokens=.. bytes=..``: what a slot now holds (5.5, 5.10)."""

    slot: int
    n_tokens: int
    """Tokens the snapshot covers."""
    host_bytes: int
    """Host memory the slot uses (the reply's ``bytes``)."""

    commands: ClassVar[tuple[str, ...]] = ("snapshot", "load_slot")

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        return cls(reply.int_field("slot"), reply.int_field("n_tokens"), reply.int_field("bytes"))


@dataclass(frozen=True, slots=True)
class SlotList(_Summary):
    """``ok list_slots slots=S:N,... bytes=..``: the occupied slots (section 5.5)."""

    slots: dict[int, int] = field(hash=False)
    """Slot number to the tokens it covers, in slot order."""
    host_bytes: int
    """Host memory all slots use (the reply's ``bytes``)."""

    commands: ClassVar[tuple[str, ...]] = ("list_slots",)

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        # Every pair is slot:n_tokens, no slot twice; listed in any order, kept in slot order.
        raw = reply._required("slots")
        slots: dict[int, int] = {}
        for pair in raw.split(",") if raw else ():
            match = _SLOT_PAIR.fullmatch(pair)
            if match is None or int(match[1]) in slots:
                raise MalformedLineError(
                    f"slots={raw!r}: {pair!r} is not a new slot:n_tokens pair", line=reply._line()
                )
            slots[int(match[1])] = int(match[2])
        return cls(dict(sorted(slots.items())), reply.int_field("bytes"))


@dataclass(frozen=True, slots=True)
class ParkState(_Summary):
    """``ok park`` / ``ok unpark``: where the target and draft models stand (section 5.6)."""

    target: ModelState
    draft: ModelState
    rss_kb: int
    """Resident set of the daemon after the change."""

    commands: ClassVar[tuple[str, ...]] = ("park", "unpark")

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        return cls(
            _enum_field(reply, "target", ModelState),
            _enum_field(reply, "draft", ModelState),
            reply.int_field("rss_kb"),
        )


@dataclass(frozen=True, slots=True)
class CompressSummary(_Summary):
    """``ok compress n_in=.. n_out=.. ms=..`` (section 5.7)."""

    n_in: int
    n_out: int
    ms: float

    commands: ClassVar[tuple[str, ...]] = ("compress",)

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        return cls(reply.int_field("n_in"), reply.int_field("n_out"), reply.float_field("ms"))


@dataclass(frozen=True, slots=True)
class EmbedSummary(_Summary):
    """``ok embed n=.. dim=.. n_tokens=.. ms=..`` (section 5.11)."""

    n: int
    """Inputs embedded: rows in the file."""
    dim: int
    """Floats per row."""
    n_tokens: int
    ms: float

    commands: ClassVar[tuple[str, ...]] = ("embed",)

    @classmethod
    def _read(cls, reply: OkReply) -> Self:
        return cls(reply.int_field("n"), reply.int_field("dim"), reply.int_field("n_tokens"),
                   reply.float_field("ms"))
