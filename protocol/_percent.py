"""Percent-encoding of values (PROTOCOL.md section 3).

A value on the wire is printable ASCII without space, ``%`` or ``=``; every other byte
of its UTF-8 form is written ``%XX``. A value without ``%`` reads as itself, so a
person can type plain values, and raw non-ASCII characters stand for their UTF-8
bytes. A ``%`` not followed by two hex digits is an error, as in the C++ daemons: a
hand-typed ``100%`` is refused rather than guessed at.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["decode_value", "decode_value_bytes", "encode_value"]

# Printable ASCII (0x21-0x7e) except "%" and "="; urllib.parse.quote always keeps
# letters, digits and "_.-~" and escapes everything outside `safe`.
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "%=")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def encode_value(value: str | bytes) -> str:
    """Percent-encode ``value`` (text as UTF-8, or raw bytes) for a line.

    Raises:
        ValueError: ``value`` is text that has no UTF-8 form (a lone surrogate).
    """
    if isinstance(value, str):
        try:
            value = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"value has no UTF-8 form: {value!r}") from exc
    return urllib.parse.quote_from_bytes(value, safe=_SAFE)


def decode_value_bytes(value: str) -> bytes:
    """The exact bytes a wire value stands for.

    Raises:
        ValueError: a ``%`` that is not followed by two hex digits.
    """
    bad = _BAD_ESCAPE.search(value)
    if bad is not None:
        raise ValueError(
            f"bad percent-escape {value[bad.start() : bad.start() + 3]!r} in {value!r}"
            " (write % as %25)"
        )
    return urllib.parse.unquote_to_bytes(value)


def decode_value(value: str, *, errors: str = "strict") -> str:
    """The text a wire value stands for.

    Args:
        value: the value as it appears on the line.
        errors: how to treat decoded bytes that are not UTF-8, as for :meth:`bytes.decode`.

    Raises:
        ValueError: a bad escape (see :func:`decode_value_bytes`), or, with
            ``errors="strict"``, escapes that spell bytes that are not UTF-8
            (:class:`UnicodeDecodeError`).
    """
    if "%" not in value:
        return value
    return decode_value_bytes(value).decode("utf-8", errors)
