"""Errors raised by protocol/.

Hierarchy::

    ProtocolError               base: bytes or lines that break PROTOCOL.md
    ├── MalformedLineError      a line does not follow sections 2-3 (carries ``line``)
    ├── CommandError            a command line a daemon must refuse (carries ``code``, ``line``)
    ├── ProtocolVersionError    a ready line announces a protocol this package does not speak
    ├── StreamFramingError      stream-fd bytes break the framing of section 1
    ├── ChannelFramingError     one-channel stdout breaks the framing of section 10
    ├── TokenFileError          a token file is not whole int32 values (carries ``path``)
    └── PieceTableError         a ``vocab`` msgpack does not have the shape of section 5.2

Constructors of commands and values raise plain :class:`ValueError` for bad arguments:
that is a programming error on the caller's side, not something a peer sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._codes import ErrorCode

__all__ = [
    "ChannelFramingError",
    "CommandError",
    "MalformedLineError",
    "PieceTableError",
    "ProtocolError",
    "ProtocolVersionError",
    "StreamFramingError",
    "TokenFileError",
]


class ProtocolError(Exception):
    """Base of every error raised by protocol/."""


class MalformedLineError(ProtocolError):
    """A protocol line that cannot be parsed. ``line`` is the offending line as received."""

    def __init__(self, message: str, *, line: str | bytes) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return f"{self.message}: {self.line!r}"


class CommandError(ProtocolError):
    """A command line that a daemon answers with ``err <code>``.

    Raised by :func:`protocol.parse_command`, the reference reading of a command line;
    ``code`` is the :class:`~protocol.ErrorCode` the daemon replies with and ``str(err)``
    a suitable detail.
    """

    def __init__(self, code: ErrorCode, message: str, *, line: str | bytes) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return self.message


class ProtocolVersionError(ProtocolError):
    """The ready line announces a protocol version other than ours."""

    def __init__(self, version: int, supported: int) -> None:
        super().__init__(f"daemon speaks protocol {version}; this client speaks {supported}")
        self.version = version
        self.supported = supported


class StreamFramingError(ProtocolError):
    """Bytes on the stream fd that break its framing.

    A negative value other than the ``-1`` terminator, or bytes after the terminator
    of the current stream command.
    """


class ChannelFramingError(ProtocolError):
    """One-channel stdout (``--channel=stdout``) that breaks the framing of section 10.

    A line starting with ``@`` that is neither ``@alive`` nor a ``@stream N`` header, or
    the end of stdout inside a stream frame.
    """


class TokenFileError(ProtocolError):
    """A token file whose size is not a multiple of 4 bytes."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class PieceTableError(ProtocolError):
    """A piece table (``vocab`` output) that is not the msgpack map of section 5.2."""
