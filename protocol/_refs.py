"""Token and text references (PROTOCOL.md section 4).

A reference is one positional word. After percent-decoding, ``ids:1,2,3`` is a list
of ids and ``text:...`` is inline text; any other word is a file path. A relative path
that itself begins with ``ids:`` or ``text:`` would read as inline data, so the
constructors refuse it and suggest the equivalent ``./ids:...``.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = [
    "IdOutOfRangeError",
    "IdsRef",
    "InlineIds",
    "InlineText",
    "TextFile",
    "TextRef",
    "TokenFile",
    "check_token_ids",
    "ids_ref_from_word",
    "parse_id_list",
    "text_ref_from_word",
]

IDS_PREFIX = "ids:"
TEXT_PREFIX = "text:"
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_ID = re.compile(r"[+-]?[0-9]+")


class IdOutOfRangeError(ValueError):
    """A well-formed id that no token can have (a daemon answers ``bad_token``)."""


def check_token_ids(ids: Iterable[int], what: str = "token id") -> tuple[int, ...]:
    """``ids`` as a tuple of ints in ``[0, 2**31)``; ValueError names the first bad one."""
    out = []
    for i in ids:
        if isinstance(i, bool):
            raise ValueError(f"{what} must be an int, not {i!r}")
        try:
            value = operator.index(i)
        except TypeError:
            raise ValueError(f"{what} must be an int, not {i!r}") from None
        if not 0 <= value <= INT32_MAX:
            raise ValueError(f"{what} must be in [0, 2**31), got {value}")
        out.append(value)
    return tuple(out)


def _check_path(path: str | os.PathLike[str], prefix: str, kind: str) -> str:
    text = os.fspath(path)
    if not isinstance(text, str):
        raise ValueError(f"{kind} path must be text, not {text!r}")
    if not text:
        raise ValueError(f"{kind} path must not be empty")
    if "\0" in text:
        raise ValueError(f"{kind} path must not contain NUL: {text!r}")
    if text.startswith(prefix):
        raise ValueError(
            f"{kind} path {text!r} would read as inline data; write './{text}' instead"
        )
    return text


@dataclass(frozen=True, slots=True)
class InlineIds:
    """Token ids written on the line: ``ids:1,2,3`` (``ids:`` alone is empty)."""

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", check_token_ids(self.ids))

    def word(self) -> str:
        """The positional word, before percent-encoding."""
        return IDS_PREFIX + ",".join(map(str, self.ids))


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A path to a token file: raw int32 little-endian ids, no header."""

    path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _check_path(self.path, IDS_PREFIX, "token file"))

    def word(self) -> str:
        """The positional word, before percent-encoding."""
        return os.fspath(self.path)


@dataclass(frozen=True, slots=True)
class InlineText:
    """Text written on the line: ``text:<percent-encoded UTF-8>``."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValueError(f"text must be str, not {type(self.text).__name__}")
        try:
            self.text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"text has no UTF-8 form: {self.text!r}") from exc

    def word(self) -> str:
        """The positional word, before percent-encoding."""
        return TEXT_PREFIX + self.text


@dataclass(frozen=True, slots=True)
class TextFile:
    """A path to a UTF-8 text file."""

    path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _check_path(self.path, TEXT_PREFIX, "text file"))

    def word(self) -> str:
        """The positional word, before percent-encoding."""
        return os.fspath(self.path)


IdsRef: TypeAlias = InlineIds | TokenFile
TextRef: TypeAlias = InlineText | TextFile


def parse_id_list(body: str, what: str) -> tuple[int, ...]:
    """Comma-separated int32 decimals (empty for ``""``), as the daemons read them.

    Raises:
        ValueError: an item that is not an int32 decimal (a daemon's ``bad_args``).
        IdOutOfRangeError: a negative id, which no vocabulary has (``bad_token``).
    """
    if not body:
        return ()
    ids = []
    for part in body.split(","):
        if not _ID.fullmatch(part) or not INT32_MIN <= int(part) <= INT32_MAX:
            raise ValueError(f"malformed {what} {body!r}: {part!r} is not a token id")
        ids.append(int(part))
    for i in ids:
        if i < 0:
            raise IdOutOfRangeError(f"{what}: token {i} is outside [0, n_vocab)")
    return tuple(ids)


def ids_ref_from_word(word: str) -> IdsRef:
    """Read a decoded positional word as a token reference (see :func:`parse_id_list`)."""
    if word.startswith(IDS_PREFIX):
        return InlineIds(parse_id_list(word[len(IDS_PREFIX) :], "inline ids"))
    return TokenFile(word)


def text_ref_from_word(word: str) -> TextRef:
    """Read a decoded positional word as a text reference."""
    if word.startswith(TEXT_PREFIX):
        return InlineText(word[len(TEXT_PREFIX) :])
    return TextFile(word)
