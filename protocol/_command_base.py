"""What every command shares: its wire form and the checks of its argument values."""

from __future__ import annotations

import operator
import os
from typing import ClassVar, SupportsIndex

from ._lines import encode_line
from ._refs import INT32_MAX, InlineIds, InlineText, TextFile, TokenFile

__all__ = [
    "CommandBase",
    "as_bool",
    "as_int",
    "bool_word",
    "check_ids_ref",
    "check_option_path",
    "check_slot",
    "check_text_ref",
    "int_in_range",
]


class CommandBase:
    """Shared wire behaviour; subclasses say their word, arguments and options."""

    __slots__ = ()

    name: ClassVar[str]
    """The command word."""
    is_stream: ClassVar[bool] = False
    """Whether the result goes to the stream fd (then ``-1``) before the reply line."""

    def encode(self) -> bytes:
        """The command line, ``\\n`` included."""
        return encode_line([self.name, *self._args()], self._options())

    def _args(self) -> list[str]:
        return []

    def _options(self) -> dict[str, str]:
        return {}


def bool_word(value: bool) -> str:
    """A boolean as the wire writes it."""
    return "1" if value else "0"


def as_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool; ValueError names the argument otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, not {value!r}")
    return value


def as_int(name: str, value: object) -> int:
    """``value`` as an int (bools refused); ValueError names the argument otherwise."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise ValueError(f"{name} must be an int, not {value!r}")
    return operator.index(value)


def int_in_range(name: str, value: object, low: int, high: int = INT32_MAX) -> int:
    """``value`` as an int in ``[low, high]`` (the wire's integers are int32 at most)."""
    number = as_int(name, value)
    if not low <= number <= high:
        bound = "2**31)" if high == INT32_MAX else f"{high}]"
        raise ValueError(f"{name} must be in [{low}, {bound}, got {number}")
    return number


def check_slot(value: object) -> int:
    """A snapshot slot number: an int in ``[0, 2**31)``.

    The daemon's ``--slots`` bounds it further; only the daemon knows that bound.
    """
    return int_in_range("slot", value, 0)


def check_option_path(what: str, value: str | os.PathLike[str]) -> str:
    """A path given as a positional or option value: non-empty text without NUL."""
    path = os.fspath(value)
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError(f"{what} path must be non-empty text without NUL, got {path!r}")
    return path


def check_ids_ref(what: str, value: object) -> InlineIds | TokenFile:
    """``value`` if it is a token reference (section 4)."""
    if not isinstance(value, InlineIds | TokenFile):
        raise ValueError(f"{what} must be InlineIds or TokenFile, not {value!r}")
    return value


def check_text_ref(what: str, value: object) -> InlineText | TextFile:
    """``value`` if it is a text reference (section 4)."""
    if not isinstance(value, InlineText | TextFile):
        raise ValueError(f"{what} must be InlineText or TextFile, not {value!r}")
    return value
