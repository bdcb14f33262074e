"""Percent-encoding of values (PROTOCOL.md section 3).

A value on the wire is printable ASCII without space, ``%`` or ``=``; every other byte
of its UTF-8 form is written ``%XX``. Decoding is deliberately forgiving so that a
person can type values by hand: a value without ``%`` reads as itself, raw non-ASCII
characters stand for their UTF-8 bytes, and a ``%`` that is not followed by two hex
digits is kept literally (as WHATWG URL decoding does). The encoder never produces
any of those forms, so encode then decode is exact.
"""

from __future__ import annotations

import urllib.parse

__all__ = ["decode_value", "decode_value_bytes", "encode_value"]

# Printable ASCII (0x21-0x7e) except "%" and "="; urllib.parse.quote always keeps
# letters, digits and "_.-~" and escapes everything outside `safe`.
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "%=")


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
    """The exact bytes a wire value stands for; never fails."""
    return urllib.parse.unquote_to_bytes(value)


def decode_value(value: str, *, errors: str = "strict") -> str:
    """The text a wire value stands for.

    Args:
        value: the value as it appears on the line.
        errors: how to treat bytes that are not UTF-8, as for :meth:`bytes.decode`.

    Raises:
        UnicodeDecodeError: (a :class:`ValueError`) with ``errors="strict"``, when the
            escapes spell bytes that are not UTF-8.
    """
    if "%" not in value:
        return value
    return decode_value_bytes(value).decode("utf-8", errors)
