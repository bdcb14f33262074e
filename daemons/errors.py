"""Errors raised by daemons/.

Hierarchy::

    DaemonsError
    ├── BuildError            the engine or our native code could not be fetched or built
    ├── ModelError            a model file is missing or cannot serve the requested role
    └── DaemonError           a running daemon failed; carries role, pid and command line
        ├── DaemonStartError  it exited or printed an error before its ready line
        │   └── HostUnreachableError  its host could not be reached (nothing came back)
        ├── DaemonDiedError   it died (signal or exit) after becoming ready
        └── DaemonReplyError  it answered a command with ``err <code>``
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BuildError",
    "DaemonDiedError",
    "DaemonError",
    "DaemonReplyError",
    "DaemonStartError",
    "DaemonsError",
    "HostUnreachableError",
    "ModelError",
]


class DaemonsError(Exception):
    """Base of every error raised by daemons/."""


class BuildError(DaemonsError):
    """The pinned engine or the native daemons could not be fetched or built."""


class ModelError(DaemonsError):
    """A model file is missing, unreadable, or of an architecture the role does not serve."""


class DaemonError(DaemonsError):
    """A daemon process failed. ``role``, ``pid`` and ``argv`` say which one."""

    def __init__(self, message: str, *, role: str, pid: int | None, argv: Sequence[str]) -> None:
        super().__init__(message)
        self.role = role
        self.pid = pid
        self.argv = list(argv)

    def __str__(self) -> str:
        return f"{self.args[0]} [{self.role} daemon, pid {self.pid}]"


class DaemonStartError(DaemonError):
    """The daemon exited, or reported an error, before announcing readiness."""


class HostUnreachableError(DaemonStartError):
    """A remote daemon's host could not be reached: its launcher (e.g. ssh) gave up on
    the connection (exit status 255), or nothing at all came back within the link timeout."""


class DaemonDiedError(DaemonError):
    """The daemon died after it was ready: killed by a signal or exited on its own."""

    def __init__(
        self,
        message: str,
        *,
        role: str,
        pid: int | None,
        argv: Sequence[str],
        returncode: int | None,
    ) -> None:
        super().__init__(message, role=role, pid=pid, argv=argv)
        self.returncode = returncode


class DaemonReplyError(DaemonError):
    """The daemon answered ``err <code> <detail>``."""

    def __init__(
        self, code: str, detail: str, *, role: str, pid: int | None, argv: Sequence[str]
    ) -> None:
        super().__init__(f"daemon replied err {code}: {detail}", role=role, pid=pid, argv=argv)
        self.code = code
        self.detail = detail
