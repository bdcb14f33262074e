"""Token ids as bytes: the stream fd's int32 values and the one token file format.

Both are raw int32 little-endian values with no header (PROTOCOL.md sections 1 and 4).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

from ._refs import check_token_ids
from .errors import TokenFileError

__all__ = ["decode_token_bytes", "encode_token_bytes", "read_token_file", "write_token_file"]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def encode_token_bytes(ids: Iterable[int]) -> bytes:
    """int32 little-endian bytes of ``ids``; negative values (the ``-1`` end) are allowed.

    Raises:
        ValueError: a value that is not an int in the int32 range.
    """
    values = list(ids)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"token value must be an int, not {value!r}")
        if not INT32_MIN <= value <= INT32_MAX:
            raise ValueError(f"token value {value} does not fit in int32")
    return struct.pack(f"<{len(values)}i", *values)


def decode_token_bytes(data: bytes | bytearray | memoryview) -> list[int]:
    """The int32 little-endian values in ``data``, negatives included.

    Raises:
        ValueError: ``len(data)`` is not a multiple of 4.
    """
    if len(data) % 4:
        raise ValueError(f"{len(data)} bytes is not a whole number of int32 values")
    return list(struct.unpack(f"<{len(data) // 4}i", data))


def write_token_file(path: str | os.PathLike[str], ids: Iterable[int]) -> None:
    """Write ``ids`` as a token file (raw int32 LE, no header), replacing ``path``.

    Raises:
        ValueError: an id that is not an int in ``[0, 2**31)``; nothing is written.
        OSError: the file could not be written.
    """
    data = encode_token_bytes(check_token_ids(ids))
    with open(path, "wb") as f:
        f.write(data)


def read_token_file(path: str | os.PathLike[str]) -> list[int]:
    """The ids in a token file.

    Values are returned as stored, so a negative value (which a daemon answers with
    ``bad_token``) is visible rather than hidden.

    Raises:
        TokenFileError: the size is not a multiple of 4 (a daemon's ``bad_token_file``).
        OSError: the file could not be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4:
        raise TokenFileError(
            f"size {len(data)} is not a multiple of 4 (raw int32 ids, no header)",
            path=os.fspath(path),
        )
    return decode_token_bytes(data)
