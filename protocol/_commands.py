"""Commands that do not decode the live sequence (PROTOCOL.md sections 5, 5.3, 5.6, 5.7).

Each command is a frozen dataclass that validates its arguments when built and knows
its wire form (``encode()``); ``_parse`` reads them back. The commands that decode or
keep the live sequence (``generate``, ``restore``, the snapshot slots) are in
``_sequence``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from ._command_base import (
    CommandBase,
    as_bool,
    bool_word,
    check_ids_ref,
    check_option_path,
    check_text_ref,
    int_in_range,
)
from ._refs import InlineIds, InlineText, TextFile, TokenFile

__all__ = [
    "COMPRESS_OPTIONS",
    "EMBED_POOLING",
    "KEEP_X1000_MAX",
    "PARK_SCOPES",
    "Cancel",
    "Compress",
    "Detokenize",
    "Embed",
    "Park",
    "ParkScope",
    "Quit",
    "Stats",
    "Tokenize",
    "Unpark",
    "Vocab",
]


@dataclass(frozen=True, slots=True)
class Tokenize(CommandBase):
    """``tokenize <text> [special=0|1] [add_bos=0|1]``: ids to the stream, then ``ok tokenize n=``.

    ``special`` parses control-token text such as ``<start_of_turn>``; ``add_bos=None``
    follows the model's own ``add_bos``.
    """

    name: ClassVar[str] = "tokenize"
    is_stream: ClassVar[bool] = True

    text: InlineText | TextFile
    special: bool = True
    add_bos: bool | None = None

    def __post_init__(self) -> None:
        check_text_ref("text", self.text)
        object.__setattr__(self, "special", as_bool("special", self.special))
        if self.add_bos is not None:
            object.__setattr__(self, "add_bos", as_bool("add_bos", self.add_bos))

    def _args(self) -> list[str]:
        return [self.text.word()]

    def _options(self) -> dict[str, str]:
        options = {}
        if not self.special:
            options["special"] = "0"
        if self.add_bos is not None:
            options["add_bos"] = bool_word(self.add_bos)
        return options


@dataclass(frozen=True, slots=True)
class Detokenize(CommandBase):
    """``detokenize <ids> [special=0|1]``: ``ok detokenize text=<percent-encoded>``.

    ``special`` renders control tokens as text.
    """

    name: ClassVar[str] = "detokenize"

    ids: InlineIds | TokenFile
    special: bool = False

    def __post_init__(self) -> None:
        check_ids_ref("ids", self.ids)
        object.__setattr__(self, "special", as_bool("special", self.special))

    def _args(self) -> list[str]:
        return [self.ids.word()]

    def _options(self) -> dict[str, str]:
        return {"special": "1"} if self.special else {}


@dataclass(frozen=True, slots=True)
class Vocab(CommandBase):
    """``vocab <path>``: write the piece table (a msgpack map) to ``path``."""

    name: ClassVar[str] = "vocab"

    path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", check_option_path("vocab", self.path))

    def _args(self) -> list[str]:
        return [os.fspath(self.path)]


@dataclass(frozen=True, slots=True)
class Stats(CommandBase):
    """``stats [path=<path>]``: ``ok stats key=value ...`` (section 5.3).

    With ``path`` the daemon also writes the same fields as a msgpack map there.
    """

    name: ClassVar[str] = "stats"

    path: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if self.path is not None:
            object.__setattr__(self, "path", check_option_path("stats", self.path))

    def _options(self) -> dict[str, str]:
        return {} if self.path is None else {"path": os.fspath(self.path)}


@dataclass(frozen=True, slots=True)
class Quit(CommandBase):
    """``quit`` (or ``exit``): ``ok quit``, then the daemon exits 0."""

    name: ClassVar[str] = "quit"


@dataclass(frozen=True, slots=True)
class Cancel(CommandBase):
    """``cancel [seq]``: stop every ``generate`` sent before it that has not finished (5.4).

    The reply is ``ok cancel running=1`` if there was one, else ``running=0``. Not a
    stream command itself: each cancelled ``generate`` still writes its own ``-1`` and
    reply (``finish=cancelled``), which come before ``ok cancel`` in command order. With
    ``seq`` (protocol 2, section 9.3), only that sequence's generation, and the reply
    adds ``seq=S``.
    """

    name: ClassVar[str] = "cancel"

    seq: int | None = None

    def __post_init__(self) -> None:
        if self.seq is not None:
            from ._sequence import check_seq

            object.__setattr__(self, "seq", check_seq(self.seq))

    def _args(self) -> list[str]:
        return [] if self.seq is None else [str(self.seq)]


ParkScope: TypeAlias = Literal["all", "target", "draft"]
"""Which models ``park`` and ``unpark`` act on: the target, the draft, or both."""

PARK_SCOPES: tuple[ParkScope, ...] = ("all", "target", "draft")


@dataclass(frozen=True, slots=True)
class _Residency(CommandBase):
    """``park``/``unpark [target|draft|all]``; ``all``, the default, is not written."""

    which: ParkScope = "all"

    def __post_init__(self) -> None:
        if self.which not in PARK_SCOPES:
            raise ValueError(f"which must be one of {', '.join(PARK_SCOPES)}, got {self.which!r}")

    def _args(self) -> list[str]:
        return [] if self.which == "all" else [self.which]


@dataclass(frozen=True, slots=True)
class Park(_Residency):
    """``park [target|draft|all]``: release weights and context, keep tokenizer and slots (5.6).

    The reply (``ok park target=.. draft=.. rss_kb=..``) reads as a
    :class:`~protocol.ParkState`.
    """

    name: ClassVar[str] = "park"


@dataclass(frozen=True, slots=True)
class Unpark(_Residency):
    """``unpark [target|draft|all]``: load the weights again into a fresh context (5.6)."""

    name: ClassVar[str] = "unpark"


KEEP_X1000_MAX = 1000
COMPRESS_OPTIONS = ("lookahead", "chunk", "pool", "segment")
# The least value of each option; segment=0 scores the prompt in one pass.
COMPRESS_OPTION_LOW = {"lookahead": 1, "chunk": 1, "pool": 1, "segment": 0}


@dataclass(frozen=True, slots=True)
class Compress(CommandBase):
    """``compress <ids> <keep_x1000> [lookahead=N] [chunk=N] [pool=N] [segment=N]`` (pflash, 5.7).

    Keeps the best ``keep_x1000 / 1000`` of the prompt, in chunk units, and writes the
    kept ids in their original order to the stream. ``None`` leaves an option to the
    daemon's default (lookahead 8, chunk 32, pool 13, segment 0: one pass); a value given
    is written even when it equals the default.
    """

    name: ClassVar[str] = "compress"
    is_stream: ClassVar[bool] = True

    ids: InlineIds | TokenFile
    keep_x1000: int
    lookahead: int | None = None
    chunk: int | None = None
    pool: int | None = None
    segment: int | None = None

    def __post_init__(self) -> None:
        check_ids_ref("ids", self.ids)
        if isinstance(self.ids, InlineIds) and not self.ids.ids:
            raise ValueError("compress needs at least one prompt token")
        object.__setattr__(
            self, "keep_x1000", int_in_range("keep_x1000", self.keep_x1000, 1, KEEP_X1000_MAX)
        )
        for key in COMPRESS_OPTIONS:
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, int_in_range(key, value, COMPRESS_OPTION_LOW[key]))

    def _args(self) -> list[str]:
        return [self.ids.word(), str(self.keep_x1000)]

    def _options(self) -> dict[str, str]:
        options = {key: getattr(self, key) for key in COMPRESS_OPTIONS}
        return {key: str(value) for key, value in options.items() if value is not None}


EmbedPooling: TypeAlias = Literal["mean", "last"]
"""How ``embed`` pools an input's hidden states: their mean, or the last position's."""

EMBED_POOLING: tuple[EmbedPooling, ...] = ("mean", "last")


@dataclass(frozen=True, slots=True)
class Embed(CommandBase):
    """``embed <ids> <path> [lengths=N,...] [pooling=mean|last]`` (section 5.11).

    ``ids`` holds every input's ids one after another, ``lengths`` how many belong to
    each (empty: one input, all of them). The daemon writes one float32 row per input to
    ``path`` (``n`` x ``dim``, little-endian), the model's hidden states pooled over the
    input's positions. It clears the live sequence; the reply reads as an
    :class:`~protocol.EmbedSummary`.
    """

    name: ClassVar[str] = "embed"

    ids: InlineIds | TokenFile
    path: str | os.PathLike[str]
    lengths: tuple[int, ...] = ()
    pooling: EmbedPooling = "mean"

    def __post_init__(self) -> None:
        check_ids_ref("ids", self.ids)
        object.__setattr__(self, "path", check_option_path("embed", self.path))
        if not isinstance(self.lengths, tuple | list):
            raise ValueError(f"lengths must be a sequence of ints, not {self.lengths!r}")
        lengths = tuple(int_in_range("length", n, 1) for n in self.lengths)
        object.__setattr__(self, "lengths", lengths)
        if isinstance(self.ids, InlineIds):
            if not self.ids.ids:
                raise ValueError("embed needs at least one token")
            if lengths and sum(lengths) != len(self.ids.ids):
                raise ValueError(
                    f"lengths add up to {sum(lengths)}, not the {len(self.ids.ids)} ids")
        if self.pooling not in EMBED_POOLING:
            raise ValueError(
                f"pooling must be one of {', '.join(EMBED_POOLING)}, got {self.pooling!r}")

    def _args(self) -> list[str]:
        return [self.ids.word(), os.fspath(self.path)]

    def _options(self) -> dict[str, str]:
        options = {}
        if self.lengths:
            options["lengths"] = ",".join(map(str, self.lengths))
        if self.pooling != "mean":
            options["pooling"] = self.pooling
        return options
