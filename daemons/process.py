"""One daemon process: spawning it, pumping its output, watching its exit, stopping it.

``open_daemon_process`` spawns the native executable in its own process group, waits
for its ready line and yields a ``DaemonProcess``. Three background tasks run while it
is open: stdout lines go to a queue (the replies), stderr lines to a bounded tail and
the log, and an exit watcher sets ``exited`` the moment the daemon dies, whoever asked.

Stream values come back on an inherited pipe (the stream fd), or, for a launch on one
channel (``channel="stdout"``, PROTOCOL.md 10), framed on stdout, where
``protocol.ChannelReader`` tells them from the replies. There a fourth task watches the
link: when nothing, not even a keep-alive, has come for ``link_timeout_s``, it kills
the launcher (ssh), so every read raises ``DaemonDiedError`` instead of waiting on a
dead TCP connection; a launch whose host never answered raises ``HostUnreachableError``.

This module moves lines and bytes; it knows no command but ``quit``. What a command
means, and the rule of one command in flight, live in ``daemons.channel``.

Shutdown follows trio's ``open_process`` shape: ask politely (``quit``), wait, then
SIGTERM and SIGKILL the whole process group, inside a shielded cancel scope, always
reaping the child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from daemons.errors import DaemonDiedError, DaemonStartError, HostUnreachableError
from daemons.roles import DAEMON_ENV, DaemonLaunch
from protocol import (
    ChannelAlive,
    ChannelFramingError,
    ChannelLine,
    ChannelReader,
    ChannelUnit,
    ErrorCode,
    ErrReply,
    Quit,
    ReadyInfo,
    parse_startup_line,
)

__all__ = ["DaemonProcess", "describe_exit", "open_daemon_process"]

log = logging.getLogger("lucerna.daemon")

_STDERR_TAIL_LINES = 40
_QUIT_GRACE_S = 5.0
_TERM_GRACE_S = 5.0
# How many reply lines may wait unread; one command in flight needs one or two.
_REPLY_QUEUE = 16
_READ_SIZE = 65536
# ssh's exit status when it cannot connect (or the connection fails); a launcher that
# exits so before a byte came back could not reach its host.
_LAUNCHER_UNREACHABLE_STATUS = 255


class _LineReader:
    """Splits a byte stream into lines; returns None at EOF."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def readline(self) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return line.rstrip(b"\r")
            chunk = await self._stream.receive_some(_READ_SIZE)
            if not chunk:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._buffer += chunk


def describe_exit(returncode: int | None) -> str:
    """How a process ended, for a message: "was killed by SIGKILL", "exited with status 1"."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


class DaemonProcess:
    """A spawned daemon: its pipes, its stderr tail, its exit. Use ``open_daemon_process``.

    Reading and writing raise ``DaemonDiedError`` once the daemon is gone, never hang.
    """

    def __init__(
        self,
        launch: DaemonLaunch,
        process: trio.Process,
        argv: list[str],
        stream: trio.lowlevel.FdStream | None,
    ) -> None:
        self.launch = launch
        self.process = process
        self.argv = argv
        self.ready: ReadyInfo | None = None
        """The ready line; set before ``open_daemon_process`` yields."""
        self.exited = trio.Event()
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self.stream_bytes = 0
        """Bytes read from the stream fd so far: the supervisor's sign of progress."""
        self._stream = stream
        """The stream fd's read end; None on one channel, where stdout carries the stream."""
        self._lines_send, self._lines_recv = trio.open_memory_channel[bytes](_REPLY_QUEUE)
        self._quitting = False
        # One channel: stream bytes routed from stdout, waiting for ``receive_stream``.
        self._channel_stream = bytearray()
        self._channel_arrived = trio.Event()
        self._channel_taken = trio.Event()
        self._delivering = False
        self._stdout_ended = False
        self.heard_at = trio.current_time()
        """When the last byte came on stdout (a keep-alive counts)."""
        self.heard_anything = False
        self.link_lost: str | None = None
        """Why the link watchdog or the channel reader killed the launcher; None: it did not."""

    # --- identity -------------------------------------------------------------------

    @property
    def role(self) -> str:
        return self.launch.role.name

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def intentional_exit(self) -> bool:
        """True when the daemon exited because we asked it to (``quit`` or shutdown)."""
        return self._quitting

    def died(self) -> DaemonDiedError:
        """The error for a daemon that is gone, with how it ended and its last stderr."""
        tail = "; ".join(list(self.stderr_tail)[-3:])
        lost = f"{self.link_lost}; the launcher " if self.link_lost else ""
        return DaemonDiedError(
            f"{lost or 'daemon '}{describe_exit(self.process.returncode)}"
            + (f" (last stderr: {tail})" if tail else ""),
            role=self.role,
            pid=self.pid,
            argv=self.argv,
            returncode=self.process.returncode,
        )

    # --- the pipes ------------------------------------------------------------------

    async def send(self, line: bytes) -> None:
        """Write one command line to the daemon's stdin."""
        if self.exited.is_set():
            raise self.died()
        assert self.process.stdin is not None
        try:
            await self.process.stdin.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self._await_exit_briefly()
            raise self.died() from None

    async def receive_line(self) -> bytes:
        """The next stdout line (a reply), without its newline."""
        try:
            return await self._lines_recv.receive()
        except trio.EndOfChannel:
            await self._await_exit_briefly()
            raise self.died() from None

    async def receive_stream(self) -> bytes:
        """The next bytes the daemon wrote to its stream (at least one)."""
        if self._stream is not None:
            data = await self._stream.receive_some(_READ_SIZE)
        else:
            while not self._channel_stream and not self._stdout_ended:
                await self._channel_arrived.wait()
                self._channel_arrived = trio.Event()
            data = bytes(self._channel_stream)
            self._channel_stream.clear()
            self._channel_taken.set()
        if not data:
            await self._await_exit_briefly()
            raise self.died()
        self.stream_bytes += len(data)
        return data

    async def _await_exit_briefly(self) -> None:
        # The pipes break a moment before the kernel reports the exit status; wait a
        # little so the error can say "killed by SIGKILL" rather than "still running".
        with trio.move_on_after(2):
            await self.exited.wait()

    # --- background tasks -----------------------------------------------------------

    async def _pump_stdout(self, stdout: trio.abc.ReceiveStream) -> None:
        reader = _LineReader(stdout)
        async with self._lines_send:
            while (line := await reader.readline()) is not None:
                await self._lines_send.send(line)

    async def _pump_channel(self, stdout: trio.abc.ReceiveStream) -> None:
        """One channel: lines to the reply queue, frames to the stream, keep-alives noted."""
        reader = ChannelReader()
        try:
            async with self._lines_send:
                while chunk := await stdout.receive_some(_READ_SIZE):
                    self.heard_at = trio.current_time()
                    self.heard_anything = True
                    self._delivering = True  # a slow reader here is no silent link
                    for unit in reader.feed(chunk):
                        await self._route(unit)
                    self._delivering = False
                    self.heard_at = trio.current_time()
                for unit in reader.eof():
                    await self._route(unit)
        except ChannelFramingError as exc:
            self.link_lost = f"stdout broke the one-channel framing ({exc})"
            log.error("%s daemon pid %d: %s; stopping it", self.role, self.pid, self.link_lost)
            self.kill()
        finally:
            self._stdout_ended = True
            self._channel_arrived.set()

    async def _route(self, unit: ChannelUnit) -> None:
        if isinstance(unit, ChannelLine):
            # A line goes out only once the stream bytes written before it were taken:
            # the order of the two fds' reads (a protocol 2 done line after its
            # sequence's end record, 9.2) holds on one channel too.
            while self._channel_stream:
                self._channel_taken = trio.Event()
                await self._channel_taken.wait()
            await self._lines_send.send(unit.line)
        elif not isinstance(unit, ChannelAlive):
            self._channel_stream += unit.data
            self._channel_arrived.set()

    async def _watch_link(self, timeout_s: float) -> None:
        """Kill the launcher once nothing has come on stdout for ``timeout_s``."""
        while not self._stdout_ended:
            await trio.sleep_until(self.heard_at + timeout_s)
            if self._delivering:
                self.heard_at = trio.current_time()
                continue
            if trio.current_time() >= self.heard_at + timeout_s and not self._stdout_ended:
                where = f"host {self.launch.host!r}" if self.launch.host else "the daemon"
                self.link_lost = (f"link lost: nothing heard from {where} for {timeout_s:g} s "
                                  "(not even a keep-alive)")
                log.error("%s daemon pid %d: %s; stopping its launcher", self.role, self.pid,
                          self.link_lost)
                self.kill()
                return

    @property
    def unreachable(self) -> bool:
        """Whether the host never answered: the launcher gave up connecting (status 255)
        or the watchdog found the link silent, before a single byte came back."""
        return (self.launch.channel == "stdout" and not self.heard_anything
                and (self.link_lost is not None
                     or self.process.returncode == _LAUNCHER_UNREACHABLE_STATUS))

    async def _pump_stderr(self, stderr: trio.abc.ReceiveStream) -> None:
        reader = _LineReader(stderr)
        logger = log.getChild(self.role)
        while (raw := await reader.readline()) is not None:
            line = raw.decode("utf-8", errors="replace")
            self.stderr_tail.append(line)
            logger.debug("[pid %d] %s", self.pid, line)

    async def _watch_exit(self) -> None:
        await self.process.wait()
        if not self._quitting:  # an exit we asked for is logged by aclose()
            log.error("%s daemon pid %d died: it %s", self.role, self.pid,
                      describe_exit(self.process.returncode))
        self.exited.set()

    # --- stopping -------------------------------------------------------------------

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the daemon's whole process group (it is gone already: nothing happens)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    async def aclose(self) -> None:
        """Quit, then escalate to SIGTERM and SIGKILL on the process group; always reap."""
        # Wait on the process itself, not on ``exited``: when our caller is cancelled
        # the task that sets ``exited`` is cancelled with it.
        with trio.CancelScope(shield=True):
            self._quitting = True
            if self.process.returncode is None:
                with trio.move_on_after(_QUIT_GRACE_S):
                    try:
                        assert self.process.stdin is not None
                        await self.process.stdin.send_all(Quit().encode())
                        await self.process.stdin.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    await self.process.wait()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self.process.returncode is not None:
                    break
                log.warning("%s daemon pid %d did not quit; sending %s", self.role, self.pid,
                            sig.name)
                self.kill(sig)
                with trio.move_on_after(_TERM_GRACE_S):
                    await self.process.wait()
            await self.process.wait()
            log.info("%s daemon pid %d stopped: it %s", self.role, self.pid,
                     describe_exit(self.process.returncode))
            self.exited.set()
            # Members of the group that outlived the leader (none expected) go too.
            self.kill()
            if self._stream is not None:
                await self._stream.aclose()

    # --- starting -------------------------------------------------------------------

    async def _await_ready(self, limit_s: float) -> ReadyInfo:
        def failure(message: str) -> DaemonStartError:
            tail = "\n".join(list(self.stderr_tail)[-8:])
            if self.unreachable:
                message = (f"host {self.launch.host!r} is unreachable: "
                           f"{self.link_lost or 'its launcher ' + describe_exit(self.returncode)}"
                           " before anything came back")
                return HostUnreachableError(
                    message + (f"\nlast stderr lines:\n{tail}" if tail else ""),
                    role=self.role, pid=self.pid, argv=self.argv)
            return DaemonStartError(message + (f"\nlast stderr lines:\n{tail}" if tail else ""),
                                    role=self.role, pid=self.pid, argv=self.argv)

        with trio.move_on_after(limit_s) as scope:
            try:
                line = await self._lines_recv.receive()
            except trio.EndOfChannel:
                await self._await_exit_briefly()
                raise failure(f"daemon {describe_exit(self.returncode)} before its ready line"
                              ) from None
        if scope.cancelled_caught:
            raise failure(f"daemon did not print its ready line within {limit_s:.0f} s")
        first = parse_startup_line(line.decode("utf-8", errors="replace"))
        if isinstance(first, ErrReply):
            await self._await_exit_briefly()
            if first.code == ErrorCode.RPC_FAILED.value and self.launch.rpc:
                # A shard (another host) does not answer: unreachable, no fault of ours.
                raise HostUnreachableError(
                    f"an RPC server of this target is unreachable: {first.detail}",
                    role=self.role, pid=self.pid, argv=self.argv)
            raise failure(f"daemon refused to start: {first.code}: {first.detail}")
        return first


@asynccontextmanager
async def open_daemon_process(
    launch: DaemonLaunch, *, ready_timeout: float = 600.0
) -> AsyncIterator[DaemonProcess]:
    """Spawn a daemon, wait for its ready line, yield it, always stop and reap it."""
    one_channel = launch.channel == "stdout"
    read_fd, write_fd = (-1, -1) if one_channel else os.pipe()
    argv = launch.argv(stream_fd=None if one_channel else write_fd)
    env = {**DAEMON_ENV, **os.environ, **launch.env}
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=() if one_channel else (write_fd,),
            start_new_session=True,  # own process group: we signal the whole group
            env=env,
        )
    except OSError as exc:
        if not one_channel:
            os.close(read_fd)
            os.close(write_fd)
        raise DaemonStartError(f"could not execute {argv[0]}: {exc}", role=launch.role.name,
                               pid=None, argv=argv) from exc
    if not one_channel:
        os.close(write_fd)  # the child holds the only write end, so its death is EOF here
    daemon = DaemonProcess(launch, process, argv,
                           None if one_channel else trio.lowlevel.FdStream(read_fd))
    assert process.stdout is not None and process.stderr is not None
    log.info("started %s daemon pid %d: %s", launch.role.name, process.pid, " ".join(argv))
    # Errors from the caller's block (and from startup) are caught inside the nursery
    # and re-raised after it, so callers see DaemonDiedError itself, not an
    # ExceptionGroup wrapping it.
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            if one_channel:
                nursery.start_soon(daemon._pump_channel, process.stdout)
                if launch.link_timeout_s is not None:
                    nursery.start_soon(daemon._watch_link, launch.link_timeout_s)
            else:
                nursery.start_soon(daemon._pump_stdout, process.stdout)
            nursery.start_soon(daemon._pump_stderr, process.stderr)
            nursery.start_soon(daemon._watch_exit)
            try:
                ready = daemon.ready = await daemon._await_ready(ready_timeout)
                log.info("%s daemon pid %d ready: arch=%s n_ctx=%d backend=%s", daemon.role,
                         daemon.pid, ready.arch, ready.n_ctx, ready.backend)
                yield daemon
            except BaseException as exc:
                failure = exc
            finally:
                await daemon.aclose()
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
    finally:
        if process.returncode is None:  # only when open_nursery itself failed
            with trio.CancelScope(shield=True):
                daemon.kill()
                await process.wait()
