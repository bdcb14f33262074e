"""The command conversation with one daemon: one command in flight (PROTOCOL.md 7).

``CommandChannel`` sits on a ``DaemonProcess``. It refuses, as ``unsupported``, a
command the ready line's capabilities do not list; it sends a command and reads its
reply, and for a stream command first its values up to ``-1``; it maps an ``err`` reply
(or a reply to another command) to ``DaemonReplyError``. ``lock`` is held for a whole
exchange, so the command client and a generation stream never interleave.
"""

from __future__ import annotations

import trio

from daemons.errors import DaemonReplyError
from daemons.process import DaemonProcess
from protocol import Command, ErrReply, OkReply, TokenStreamReader, parse_reply_line

__all__ = ["CommandChannel"]


class CommandChannel:
    """Commands and replies over one ``DaemonProcess``, one exchange at a time."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.lock = trio.Lock()
        """Held from sending a command to reading its reply."""

    def refusal(self, code: str, detail: str) -> DaemonReplyError:
        """A ``DaemonReplyError`` naming this daemon."""
        daemon = self.daemon
        return DaemonReplyError(code, detail, role=daemon.role, pid=daemon.pid, argv=daemon.argv)

    def check_served(self, command: Command) -> None:
        """Refuse a command the ready line does not list, as the daemon would (``unsupported``).

        Asking anyway is not only wasted: a daemon of an older protocol answers a stream
        command it does not know without ending its stream, which would hang the reader.
        """
        ready = self.daemon.ready
        if ready is not None and command.name not in ready.capabilities:
            raise self.refusal(
                "unsupported",
                f"{command.name} is not in the capabilities of this daemon "
                f"({','.join(sorted(ready.capabilities))})")

    def serves(self, command: str) -> bool:
        """Whether the ready line lists ``command``."""
        ready = self.daemon.ready
        return ready is not None and command in ready.capabilities

    async def receive_reply(self) -> OkReply | ErrReply:
        """The next reply line, parsed."""
        line = await self.daemon.receive_line()
        return parse_reply_line(line.decode("utf-8", errors="replace"))

    def answer(self, reply: OkReply | ErrReply, expect: str) -> OkReply:
        """The ``ok`` reply to ``expect``; an ``err`` reply raises DaemonReplyError."""
        if isinstance(reply, ErrReply):
            raise self.refusal(reply.code, reply.detail)
        if reply.command != expect:
            raise self.refusal("protocol", f"expected a reply to {expect}, got {reply}")
        return reply

    async def run(self, command: Command) -> OkReply:
        """Send a command that writes nothing to the stream; its ``ok`` reply."""
        self.check_served(command)
        async with self.lock:
            await self.daemon.send(command.encode())
            reply = await self.receive_reply()
        return self.answer(reply, command.name)

    async def run_stream(self, command: Command) -> tuple[list[int], OkReply]:
        """Send a stream command; all its values (``-1`` not included) and its ``ok`` reply."""
        self.check_served(command)
        async with self.lock:
            await self.daemon.send(command.encode())
            reader = TokenStreamReader()
            values: list[int] = []
            while not reader.finished:
                values.extend(reader.feed(await self.daemon.receive_stream()))
            reply = await self.receive_reply()
        return values, self.answer(reply, command.name)
