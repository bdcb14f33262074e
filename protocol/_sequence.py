"""Commands on the live sequence: ``generate``, ``restore`` and the snapshot slots.

PROTOCOL.md sections 5.1 and 5.5. ``generate`` and ``restore`` decode the same way and
take the same options; ``restore`` first loads a slot and prefills only what the slot
does not already hold.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import ClassVar

from ._codes import MAX_LOGPROBS, MAX_PARALLEL
from ._command_base import (
    CommandBase,
    as_bool,
    bool_word,
    check_ids_ref,
    check_option_path,
    check_slot,
    check_text_ref,
    int_in_range,
)
from ._refs import INT32_MAX, InlineIds, InlineText, TextFile, TokenFile, check_token_ids
from ._sampling import SamplingParams

__all__ = [
    "FreeSnapshot",
    "Generate",
    "ListSlots",
    "LoadSlot",
    "Restore",
    "SaveSlot",
    "Snapshot",
    "check_marks",
    "check_seq",
    "check_snap",
]


@dataclass(frozen=True, slots=True)
class _Decoding(CommandBase):
    """The decoding options ``generate`` and ``restore`` share (section 5.1).

    Keyword-only, so that each command's positional arguments keep the wire order.
    """

    is_stream: ClassVar[bool] = True

    stop: tuple[int, ...] = field(default=(), kw_only=True)
    """Token ids that end the generation (written, ``finish=stop``)."""
    ignore_eos: bool = field(default=False, kw_only=True)
    """Do not stop at end-of-generation tokens."""
    grammar: InlineText | TextFile | None = field(default=None, kw_only=True)
    """A GBNF grammar every sampled token must satisfy."""
    json_schema: InlineText | TextFile | None = field(default=None, kw_only=True)
    """A JSON schema the output must satisfy (the daemon converts it to a grammar)."""
    snap: tuple[int, int] | None = field(default=None, kw_only=True)
    """``(L, S)``: snapshot into slot ``S`` once the first ``L`` prompt tokens are in."""
    logprobs: int | None = field(default=None, kw_only=True)
    """``K`` in ``0..MAX_LOGPROBS``: each token comes with its log-probability and the
    ``K`` most likely alternatives' (read with :class:`~protocol.LogprobStreamReader`);
    None: bare ids."""
    lookup: bool | None = field(default=None, kw_only=True)
    """Prompt lookup (section 5.9) on or off for this request; None: the daemon's
    ``--lookup`` default. True needs a daemon started with ``--lookup=opt-in|on``."""
    seq: int | None = field(default=None, kw_only=True)
    """Protocol 2 (section 9): the sequence ``0 .. parallel-1`` it runs on, beside the
    others. The reply is then ``ok <command> seq=S`` at once, the values come as framed
    records (:class:`~protocol.FramedStreamReader`) and the summary as a ``done`` line.
    None: protocol 1, one generation at a time."""

    @property
    def framed(self) -> bool:
        """Whether this is the protocol 2 form (it names ``seq``)."""
        return self.seq is not None


@dataclass(frozen=True, slots=True)
class Generate(_Decoding):
    """``generate <ids> <n_gen> [options]``: prefill ``prompt``, then decode up to ``n_gen``.

    ``sampling=None`` is stored as ``SamplingParams()`` (greedy, daemon defaults), so
    ``.sampling`` is always a :class:`SamplingParams`. With ``reuse`` (the default) the
    daemon starts from the longest prefix of ``prompt`` whose state it holds (section
    5.10); ``marks`` are prompt positions where the prefill splits and keeps a checkpoint.
    """

    name: ClassVar[str] = "generate"

    prompt: InlineIds | TokenFile
    n_gen: int
    sampling: SamplingParams | None = None
    reuse: bool = field(default=True, kw_only=True)
    marks: tuple[int, ...] = field(default=(), kw_only=True)
    prompt_logprobs: bool = field(default=False, kw_only=True)
    """With ``logprobs=K``: the stream starts with one record per prompt token after the
    first (its log-probability given the tokens before it), then the generated tokens'
    records; the prefill starts from an empty sequence, and ``n_gen`` may be 0."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_logprobs",
                           as_bool("prompt_logprobs", self.prompt_logprobs))
        if self.prompt_logprobs and self.logprobs is None:
            raise ValueError("prompt_logprobs needs logprobs=K (the alternatives per record)")
        _check_decoding(self)
        object.__setattr__(self, "reuse", as_bool("reuse", self.reuse))
        object.__setattr__(self, "marks", check_marks(self.marks, self.prompt))

    def _args(self) -> list[str]:
        return [self.prompt.word(), str(self.n_gen)]

    def _options(self) -> dict[str, str]:
        options = _decoding_options(self)
        if not self.reuse:
            options["reuse"] = "0"
        if self.marks:
            options["marks"] = ",".join(map(str, self.marks))
        if self.prompt_logprobs:
            options["prompt_logprobs"] = "1"
        return options


@dataclass(frozen=True, slots=True)
class Restore(_Decoding):
    """``restore <slot> <ids> <n_gen> [options]``: load ``slot``, then decode as ``generate``.

    The slot's tokens must be a prefix of ``prompt``; only the rest is prefilled. The
    reply is that of ``generate`` plus ``n_reused`` (see :class:`~protocol.GenerateSummary`).
    """

    name: ClassVar[str] = "restore"

    slot: int
    prompt: InlineIds | TokenFile
    n_gen: int
    sampling: SamplingParams | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", check_slot(self.slot))
        _check_decoding(self)

    def _args(self) -> list[str]:
        return [str(self.slot), self.prompt.word(), str(self.n_gen)]

    def _options(self) -> dict[str, str]:
        return _decoding_options(self)


def _check_decoding(command: Generate | Restore) -> None:
    def keep(name: str, value: object) -> None:
        object.__setattr__(command, name, value)

    prompt = check_ids_ref("prompt", command.prompt)
    if isinstance(prompt, InlineIds) and not prompt.ids:
        raise ValueError(f"{command.name} needs at least one prompt token")
    # Scoring a prompt alone (prompt_logprobs) may generate nothing.
    scoring = isinstance(command, Generate) and command.prompt_logprobs
    keep("n_gen", int_in_range("n_gen", command.n_gen, 0 if scoring else 1))
    if command.sampling is None:
        keep("sampling", SamplingParams())
    elif not isinstance(command.sampling, SamplingParams):
        raise ValueError(f"sampling must be SamplingParams, not {command.sampling!r}")
    keep("stop", check_token_ids(command.stop, "stop token"))
    keep("ignore_eos", as_bool("ignore_eos", command.ignore_eos))
    if command.grammar is not None:
        check_text_ref("grammar", command.grammar)
    if command.json_schema is not None:
        check_text_ref("json_schema", command.json_schema)
        if command.grammar is not None:
            raise ValueError("grammar and json_schema exclude each other")
    if command.snap is not None:
        keep("snap", check_snap(command.snap, prompt))
    if command.logprobs is not None:
        keep("logprobs", int_in_range("logprobs", command.logprobs, 0, MAX_LOGPROBS))
    if command.lookup is not None:
        keep("lookup", as_bool("lookup", command.lookup))
    if command.seq is not None:
        keep("seq", check_seq(command.seq))


def check_seq(seq: object) -> int:
    """A protocol 2 sequence number: ``0 .. MAX_PARALLEL - 1`` (the daemon checks its own
    ``parallel``)."""
    return int_in_range("seq", seq, 0, MAX_PARALLEL - 1)


def check_snap(snap: object, prompt: InlineIds | TokenFile) -> tuple[int, int]:
    """``snap=L:S`` as ``(L, S)``: ``1 <= L``, and ``L <= len(prompt)`` when that is known."""
    if not isinstance(snap, tuple) or len(snap) != 2:
        raise ValueError(f"snap must be a (position, slot) pair, not {snap!r}")
    n_prompt = len(prompt.ids) if isinstance(prompt, InlineIds) else None
    position = int_in_range("snap position", snap[0], 1, n_prompt or INT32_MAX)
    return position, check_slot(snap[1])


def check_marks(marks: object, prompt: InlineIds | TokenFile) -> tuple[int, ...]:
    """``marks=L,...``: strictly ascending positions in ``1 .. len(prompt)`` (when known)."""
    if not isinstance(marks, tuple | list):
        raise ValueError(f"marks must be a sequence of positions, not {marks!r}")
    n_prompt = len(prompt.ids) if isinstance(prompt, InlineIds) else None
    checked = tuple(int_in_range("mark", m, 1, n_prompt or INT32_MAX) for m in marks)
    if any(b <= a for a, b in itertools.pairwise(checked)):
        raise ValueError(f"marks must ascend strictly, got {checked!r}")
    return checked


def _decoding_options(command: Generate | Restore) -> dict[str, str]:
    options = command.sampling.to_options() if command.sampling is not None else {}
    if command.stop:
        options["stop"] = ",".join(map(str, command.stop))
    if command.ignore_eos:
        options["ignore_eos"] = bool_word(command.ignore_eos)
    if command.grammar is not None:
        options["grammar"] = command.grammar.word()
    if command.json_schema is not None:
        options["json_schema"] = command.json_schema.word()
    if command.snap is not None:
        position, slot = command.snap
        options["snap"] = f"{position}:{slot}"
    if command.logprobs is not None:
        options["logprobs"] = str(command.logprobs)
    if command.lookup is not None:
        options["lookup"] = bool_word(command.lookup)
    if command.seq is not None:
        options["seq"] = str(command.seq)
    return options


@dataclass(frozen=True, slots=True)
class _SlotCommand(CommandBase):
    """A command whose one argument is a snapshot slot."""

    slot: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", check_slot(self.slot))

    def _args(self) -> list[str]:
        return [str(self.slot)]


@dataclass(frozen=True, slots=True)
class Snapshot(_SlotCommand):
    """``snapshot <slot> [seq=S]``: copy the live sequence into ``slot`` (section 5.5).

    With ``seq`` (protocol 2, section 9), sequence ``S``'s state, which must not be
    generating. The reply (``ok snapshot slot=.. n_tokens=.. bytes=..``) reads as a
    :class:`~protocol.SnapshotInfo`.
    """

    name: ClassVar[str] = "snapshot"

    seq: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", check_slot(self.slot))
        if self.seq is not None:
            object.__setattr__(self, "seq", check_seq(self.seq))

    def _options(self) -> dict[str, str]:
        return {} if self.seq is None else {"seq": str(self.seq)}


@dataclass(frozen=True, slots=True)
class FreeSnapshot(_SlotCommand):
    """``free_snapshot <slot>``: release ``slot`` (``ok free_snapshot slot=.. bytes=..``)."""

    name: ClassVar[str] = "free_snapshot"


@dataclass(frozen=True, slots=True)
class ListSlots(CommandBase):
    """``list_slots``: the occupied slots (``ok list_slots slots=S:N,... bytes=..``)."""

    name: ClassVar[str] = "list_slots"


@dataclass(frozen=True, slots=True)
class _SlotFileCommand(CommandBase):
    """A command on a slot and a snapshot file (section 5.10)."""

    slot: int
    path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", check_slot(self.slot))
        object.__setattr__(self, "path", check_option_path(self.name, self.path))

    def _args(self) -> list[str]:
        return [str(self.slot), os.fspath(self.path)]


@dataclass(frozen=True, slots=True)
class SaveSlot(_SlotFileCommand):
    """``save_slot <slot> <path>``: write the slot to a file (``ok save_slot slot=.. bytes=..``).

    The file carries the daemon's state identity and a checksum; it is written to a
    temporary name and renamed, so it is whole or absent.
    """

    name: ClassVar[str] = "save_slot"


@dataclass(frozen=True, slots=True)
class LoadSlot(_SlotFileCommand):
    """``load_slot <slot> <path>``: read a snapshot file into the slot (section 5.10).

    The reply reads as a :class:`~protocol.SnapshotInfo`. A file of another identity, a
    truncated or corrupt one is ``err bad_snapshot_file`` and the slot is left as it was.
    """

    name: ClassVar[str] = "load_slot"
