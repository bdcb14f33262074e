"""An in-memory child process: pipes with os.pipe's semantics and an exit status.

``daemons.process.DaemonProcess`` reads a ``trio.Process`` (``pid``, ``returncode``,
``stdin``, ``stdout``, ``stderr``, ``wait``) and a stream fd; ``FakeProcess`` is exactly
that surface, in memory, so the real ``DaemonProcess`` pumps, exit watcher and shutdown
run unchanged on it. Its pipes behave as the kernel's do where a client can tell:
closing the write end is EOF for the reader, closing the read end breaks the writer
(``BrokenResourceError``), a second concurrent reader is ``BusyResourceError``, and a
process that exits closes its ends of all of them at once.
"""

from __future__ import annotations

import itertools

import trio

__all__ = ["FakeProcess", "Pipe"]

# Above any kernel's pid_max (2**22), so a fake pid can never name a real process.
_PIDS = itertools.count(10_000_000)


class Pipe:
    """One pipe: ``writer`` at one end, ``reader`` at the other."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._changed = trio.Event()
        self.write_closed = False
        self.read_closed = False
        self._reading = False
        self.writer = _PipeWriter(self)
        self.reader = _PipeReader(self)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def close_write(self) -> None:
        self.write_closed = True
        self._wake()

    def close_read(self) -> None:
        self.read_closed = True
        self._data.clear()
        self._wake()


class _PipeWriter(trio.abc.SendStream):
    def __init__(self, pipe: Pipe) -> None:
        self._pipe = pipe

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        pipe = self._pipe
        if pipe.write_closed:
            raise trio.ClosedResourceError("this end of the pipe is closed")
        if pipe.read_closed:
            raise trio.BrokenResourceError("the pipe's reader is gone (EPIPE)")
        if data:
            pipe._data += data
            pipe._wake()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self._pipe.close_write()
        await trio.lowlevel.checkpoint()


class _PipeReader(trio.abc.ReceiveStream):
    def __init__(self, pipe: Pipe) -> None:
        self._pipe = pipe

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        pipe = self._pipe
        if pipe._reading:
            raise trio.BusyResourceError("another task is reading this pipe")
        pipe._reading = True
        try:
            await trio.lowlevel.checkpoint()
            while True:
                if pipe.read_closed:
                    raise trio.ClosedResourceError("this end of the pipe is closed")
                if pipe._data:
                    size = len(pipe._data) if max_bytes is None else max_bytes
                    chunk = bytes(pipe._data[:size])
                    del pipe._data[:size]
                    return chunk
                if pipe.write_closed:
                    return b""  # EOF
                await pipe._changed.wait()
        finally:
            pipe._reading = False

    async def aclose(self) -> None:
        self._pipe.close_read()
        await trio.lowlevel.checkpoint()


class FakeProcess:
    """The ``trio.Process`` surface ``DaemonProcess`` uses: pid, pipes, exit status.

    The daemon side writes ``stdout_pipe``, ``stderr_pipe`` and ``stream_pipe`` and
    reads ``stdin_pipe``; ``exit`` ends the process as the kernel would: its ends of
    every pipe close (EOF for the readers, EPIPE for the stdin writer) and ``wait``
    returns ``returncode`` (negative: killed by that signal).
    """

    def __init__(self) -> None:
        self.pid = next(_PIDS)
        self.returncode: int | None = None
        self._exited = trio.Event()
        self.stdin_pipe, self.stdout_pipe = Pipe(), Pipe()
        self.stderr_pipe, self.stream_pipe = Pipe(), Pipe()
        self.stdin: trio.abc.SendStream = self.stdin_pipe.writer
        self.stdout: trio.abc.ReceiveStream = self.stdout_pipe.reader
        self.stderr: trio.abc.ReceiveStream = self.stderr_pipe.reader

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def exit(self, returncode: int) -> None:
        """The process is gone: close its pipe ends, record the status (first one wins)."""
        if self.returncode is not None:
            return
        self.returncode = returncode
        self.stdin_pipe.close_read()
        for pipe in (self.stdout_pipe, self.stderr_pipe, self.stream_pipe):
            pipe.close_write()
        self._exited.set()
