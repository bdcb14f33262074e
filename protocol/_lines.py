"""The generic line form shared by every command and reply (PROTOCOL.md section 3).

A line is words separated by one or more spaces and ended by ``\\n`` (a ``\\r`` before
it is ignored). The first word is the command (or ``ok``/``err``/``ready``) and is
never encoded. Then come positional words, then ``key=value`` options. In a command
line a word is an option when it holds a raw ``=`` and the text before the first ``=``
is a key (``[a-z0-9_]+``); any other word is positional, so a hand-typed path such as
``/tmp/a=b`` still reads as a path. Positionals and option values are percent-encoded
(see ``_percent``); keys and the first word are not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from ._percent import decode_value, encode_value
from .errors import MalformedLineError

__all__ = ["CommandLine", "encode_line", "parse_command_line"]

EMPTY_LINE = "empty line"

_KEY = re.compile(r"[a-z0-9_]+")


class CommandLine(NamedTuple):
    """A command line split into its parts, values percent-decoded.

    A tuple, so ``command, args, options = parse_command_line(line)`` works.
    """

    command: str
    args: tuple[str, ...]
    options: dict[str, str]


def encode_line(words: Sequence[str], options: Mapping[str, str] | None = None) -> bytes:
    """Encode one protocol line, ``\\n`` included.

    Args:
        words: the first word (sent as is, so it must need no encoding), then the
            positional values (percent-encoded here; none may be empty, since an empty
            word cannot be seen on a line).
        options: ``key=value`` pairs in the order given; values are percent-encoded
            here and may be empty.

    Raises:
        ValueError: an empty or unencodable word, or a key outside ``[a-z0-9_]+``.
    """
    if not words:
        raise ValueError("a line needs at least one word")
    head = words[0]
    if not head or encode_value(head) != head:
        raise ValueError(f"first word must be non-empty printable ASCII without '%'/'=': {head!r}")
    out = [head]
    for word in words[1:]:
        if word == "":
            raise ValueError("an empty positional value cannot be written on a line")
        out.append(encode_value(word))
    for key, value in (options or {}).items():
        if not _KEY.fullmatch(key):
            raise ValueError(f"option key must match [a-z0-9_]+: {key!r}")
        out.append(f"{key}={encode_value(value)}")
    return (" ".join(out) + "\n").encode("ascii")


def parse_command_line(line: str | bytes) -> CommandLine:
    """Split a command line into command, positionals and options: the reference semantics.

    The command word is returned as is. Values are percent-decoded and must be UTF-8.
    A trailing ``\\n`` and ``\\r`` are ignored.

    Raises:
        MalformedLineError: an empty line, a positional after an option, a repeated
            key, a bad percent-escape, or a value that is not UTF-8 once decoded.
    """
    words = split_words(line, errors="strict")
    if not words:
        raise MalformedLineError(EMPTY_LINE, line=line)
    args: list[str] = []
    options: dict[str, str] = {}
    for word in words[1:]:
        key, eq, raw = word.partition("=")
        if eq and _KEY.fullmatch(key):
            _add_option(options, key, raw, line=line, errors="strict")
        elif options:
            raise MalformedLineError(
                f"positional argument {word!r} after options (encode '=' as %3D)", line=line
            )
        else:
            args.append(_decode(word, line=line, errors="strict"))
    return CommandLine(words[0], tuple(args), options)


def split_words(line: str | bytes, *, errors: str) -> list[str]:
    """The space-separated words of one line; ``errors`` applies to decoding bytes."""
    if isinstance(line, bytes):
        try:
            text = line.decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            raise MalformedLineError("line is not UTF-8", line=line) from exc
    else:
        text = line
    text = text.removesuffix("\n").removesuffix("\r")
    if "\n" in text:
        raise MalformedLineError("more than one line", line=line)
    return [word for word in text.split(" ") if word]


def parse_pairs(words: Iterable[str], *, line: str | bytes, errors: str) -> dict[str, str]:
    """Options from words that must all be ``key=value``; values percent-decoded."""
    pairs: dict[str, str] = {}
    for word in words:
        key, eq, raw = word.partition("=")
        if not eq:
            raise MalformedLineError(f"expected key=value, got {word!r}", line=line)
        _add_option(pairs, key, raw, line=line, errors=errors)
    return pairs


def _add_option(
    options: dict[str, str], key: str, raw: str, *, line: str | bytes, errors: str
) -> None:
    if not key:
        raise MalformedLineError(f"option with an empty key: {key}={raw}", line=line)
    if key in options:
        raise MalformedLineError(f"option {key!r} given twice", line=line)
    options[key] = _decode(raw, line=line, errors=errors)


def _decode(raw: str, *, line: str | bytes, errors: str) -> str:
    try:
        return decode_value(raw, errors=errors)
    except UnicodeDecodeError as exc:
        raise MalformedLineError(f"value {raw!r} is not UTF-8 once decoded", line=line) from exc
    except ValueError as exc:
        raise MalformedLineError(str(exc), line=line) from exc
