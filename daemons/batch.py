"""Several generations at once on one daemon: the protocol 2 client (PROTOCOL.md 9).

``open_batch_client`` takes over a ready ``DaemonProcess`` (its stdout and its stream
fd: no ``DaemonClient`` may use the process meanwhile) and yields a ``BatchClient``.
``BatchClient.open_sequence`` starts a ``generate`` or ``restore`` that names its
sequence (``seq=S``) and yields a ``SequenceStream``, an async iterator of that
sequence's tokens; any number of them, one per sequence, run at once, each read by its
own task. ``BatchClient.run`` sends any other command that may run beside them
(``stats``, ``snapshot <slot> seq=S``, ``list_slots``, ``cancel <seq>`` ...).

Two background tasks read the daemon: one its stdout, where replies come in command
order and ``done <seq> ...`` lines whenever a sequence ends; one its stream fd, whose
records carry their sequence. Each goes to the ``SequenceStream`` or the waiting
command it belongs to. Leaving a sequence's block early sends ``cancel <seq>`` and
drains it; a daemon that cannot be brought back is killed, as ``daemons.generation``
does for protocol 1. The daemon's death ends every stream and command with
``DaemonDiedError``.
"""

from __future__ import annotations

import logging
import math
import struct
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from daemons.errors import DaemonDiedError, DaemonReplyError
from daemons.generation import CANCEL_DRAIN_S
from daemons.process import DaemonProcess
from protocol import (
    Cancel,
    Command,
    DoneLine,
    ErrReply,
    FramedStreamReader,
    Generate,
    GenerateSummary,
    LogprobStreamReader,
    OkReply,
    Restore,
    SeqEnd,
    TokenLogprobs,
    parse_daemon_line,
)

__all__ = ["BatchClient", "SequenceStream", "open_batch_client"]

log = logging.getLogger("lucerna.daemon")



class SequenceStream:
    """The tokens of one protocol 2 generation as they arrive; ``summary`` once it ended."""

    def __init__(self, client: BatchClient, command: Generate | Restore, n_prompt: int = 0) -> None:
        assert command.seq is not None
        self.seq = command.seq
        self._client = client
        self._command = command
        # With prompt_logprobs the first n_prompt - 1 records are the prompt's (9.2, 5.1).
        scoring = isinstance(command, Generate) and command.prompt_logprobs
        self._prompt_wanted = max(0, n_prompt - 1) if scoring else 0
        self._send, self._receive = trio.open_memory_channel[tuple[int, ...]](math.inf)
        # The end record and the done line come on two fds, read by two tasks: either may
        # be read first, and the sequence has ended once both were (PROTOCOL.md 7, 9.2).
        self._ended = trio.Event()  # the end record was read
        self._finished = trio.Event()  # the done line was read
        self._failure: BaseException | None = None
        self.summary: GenerateSummary | None = None
        self.logprobs: TokenLogprobs | None = None
        """The record of the token the last ``__anext__`` returned, when the generation
        asked for logprobs; None otherwise."""

    @property
    def done(self) -> bool:
        """Its end record and its done line have been read: the sequence is free for the
        next generation."""
        return self._finished.is_set() and self._ended.is_set()

    def __aiter__(self) -> SequenceStream:
        return self

    async def __anext__(self) -> int:
        try:
            values = await self._receive.receive()
        except trio.EndOfChannel:
            await self._finish()
            raise StopAsyncIteration from None
        if self._command.logprobs is None:
            return values[0]
        reader = LogprobStreamReader(self._command.logprobs)
        (self.logprobs,) = reader.feed(struct.pack(f"<{len(values)}i", *values))
        return self.logprobs.token

    async def read_prompt_logprobs(self) -> list[TokenLogprobs]:
        """The prompt tokens' records (``prompt_logprobs``), which come before any
        generated token; fewer when the generation was cancelled, none when it did not
        ask for them."""
        records: list[TokenLogprobs] = []
        if self._prompt_wanted == 0:
            return records
        assert self._command.logprobs is not None  # the daemon refuses it without
        reader = LogprobStreamReader(self._command.logprobs)
        while len(records) < self._prompt_wanted:
            try:
                values = await self._receive.receive()
            except trio.EndOfChannel:
                break
            records += reader.feed(struct.pack(f"<{len(values)}i", *values))
        return records

    async def collect(self) -> list[int]:
        """Every remaining token, then the summary is set."""
        return [token async for token in self]

    async def _finish(self) -> None:
        await self._finished.wait()
        if self._failure is not None:
            raise self._failure

    # --- fed by the client's readers -----------------------------------------------------

    def _record(self, values: tuple[int, ...]) -> None:
        self._send.send_nowait(values)

    def _end(self) -> None:
        self._ended.set()
        self._send.close()

    def _done(self, reply: OkReply | ErrReply) -> None:
        # Its last records may still be unread on the stream fd: the channel stays open
        # until the end record closes it.
        if isinstance(reply, ErrReply):
            self._failure = self._client._refusal(reply.code, reply.detail)
        else:
            self.summary = GenerateSummary.from_reply(reply)
        self._finished.set()

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        self._finished.set()
        if not self._ended.is_set():
            self._ended.set()
            self._send.close()


class _PendingReply:
    def __init__(self, command: Command) -> None:
        self.command = command
        self.event = trio.Event()
        self.reply: OkReply | ErrReply | None = None
        self.failure: BaseException | None = None


class BatchClient:
    """A daemon speaking protocol 2. Use through ``open_batch_client``."""

    def __init__(self, daemon: DaemonProcess) -> None:
        ready = daemon.ready
        if ready is None or 2 not in ready.protocols:
            raise ValueError("the daemon does not speak protocol 2 "
                             "(its ready line lists no protocols=...2)")
        self.daemon = daemon
        self.parallel = ready.parallel
        """How many sequences may generate at once: ``0 .. parallel - 1``."""
        self._send_lock = trio.Lock()
        self._replies: deque[_PendingReply] = deque()
        self._sequences: dict[int, SequenceStream] = {}
        self._broken: BaseException | None = None

    def busy(self, seq: int) -> bool:
        """Whether sequence ``seq`` has a generation that has not ended."""
        return seq in self._sequences

    def free_seqs(self) -> list[int]:
        """The sequences without a running generation, in order."""
        return [s for s in range(self.parallel) if s not in self._sequences]

    def _refusal(self, code: str, detail: str) -> DaemonReplyError:
        daemon = self.daemon
        return DaemonReplyError(code, detail, role=daemon.role, pid=daemon.pid, argv=daemon.argv)

    # --- commands ------------------------------------------------------------------------

    async def _exchange(
        self, command: Command, before_send: SequenceStream | None = None
    ) -> OkReply:
        if self._broken is not None:
            raise self._broken
        pending = _PendingReply(command)
        async with self._send_lock:
            # Shielded: a caller cancelled (its client went away) between queueing the
            # reply and writing the line would leave a reply no line answers, and every
            # later reply would go to the wrong waiter.
            with trio.CancelScope(shield=True):
                # Registered before the line goes out: its records may come before the reply.
                if before_send is not None:
                    self._sequences[before_send.seq] = before_send
                self._replies.append(pending)
                await self.daemon.send(command.encode())
        await pending.event.wait()
        if pending.failure is not None:
            raise pending.failure
        reply = pending.reply
        assert reply is not None
        if isinstance(reply, ErrReply):
            raise self._refusal(reply.code, reply.detail)
        expected = "quit" if command.name == "exit" else command.name
        if reply.command != expected:
            raise self._refusal("protocol", f"expected a reply to {command.name}, got {reply}")
        return reply

    async def run(self, command: Command) -> OkReply:
        """Send a command that writes nothing to the stream; its ``ok`` reply.

        Commands that wait for running generations (PROTOCOL.md 9.3: ``tokenize``,
        ``park``, ``embed`` ...) are answered once those have ended.

        Raises:
            ValueError: a stream command (use ``open_sequence``).
            DaemonReplyError: the daemon answered ``err``.
            DaemonDiedError: the daemon is gone.
        """
        if command.is_stream:
            raise ValueError(f"{command.name} writes to the stream; use open_sequence with seq=")
        return await self._exchange(command)

    async def cancel(self, seq: int) -> bool:
        """``cancel <seq>``: whether the sequence had a generation to stop."""
        reply = await self.run(Cancel(seq))
        return reply.fields.get("running") == "1"

    @asynccontextmanager
    async def open_sequence(self, command: Generate | Restore,
                            n_prompt: int = 0) -> AsyncIterator[SequenceStream]:
        """Start ``command`` (which names its ``seq``) and yield its stream.

        ``n_prompt`` is the prompt's length, which a ``prompt_logprobs`` stream needs to
        tell the prompt's records from the generated tokens' (the command may name a file).

        Leaving the block before the stream ended cancels the generation and drains it,
        so the sequence is free again when the block is left.

        Raises:
            ValueError: ``command`` names no sequence, or one outside ``0 .. parallel-1``.
            DaemonReplyError: the daemon refused it (``seq_busy``, ``bad_args`` ...).
        """
        if command.seq is None or not 0 <= command.seq < self.parallel:
            raise ValueError(
                f"{command.name} needs seq= in 0..{self.parallel - 1}, got {command.seq}")
        if command.seq in self._sequences:
            raise self._refusal("seq_busy", f"sequence {command.seq} is still generating")
        stream = SequenceStream(self, command, n_prompt)
        try:
            await self._exchange(command, before_send=stream)
        except BaseException:
            # Still registered: the line went out and the caller was cancelled before its
            # reply came. The daemon runs it, so it is stopped and drained as a stream
            # left early is; forgetting it would offer a busy sequence to the next request.
            if self._sequences.get(command.seq) is stream:
                await self._abandon(stream)
            if self._sequences.get(command.seq) is stream:
                del self._sequences[command.seq]
            raise
        try:
            yield stream
        finally:
            if not stream.done:
                await self._abandon(stream)

    async def _abandon(self, stream: SequenceStream) -> None:
        daemon = self.daemon
        with trio.CancelScope(shield=True):
            if daemon.exited.is_set() or self._broken is not None:
                return
            try:
                with trio.fail_after(CANCEL_DRAIN_S):
                    if not stream._finished.is_set():
                        await self.cancel(stream.seq)
                    await stream._finished.wait()
                    await stream._ended.wait()
            except (trio.TooSlowError, DaemonDiedError, DaemonReplyError, trio.BrokenResourceError,
                    trio.ClosedResourceError):
                log.error("%s daemon pid %d did not stop sequence %d; killing it",
                          daemon.role, daemon.pid, stream.seq)
                daemon.kill()

    # --- the readers -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        while True:
            line = await self.daemon.receive_line()
            parsed = parse_daemon_line(line)
            if isinstance(parsed, DoneLine):
                stream = self._sequences.get(parsed.seq)
                if stream is None or stream._finished.is_set():
                    log.warning("done line for sequence %d, which runs nothing here", parsed.seq)
                else:
                    stream._done(parsed.reply)
                    self._release_if_ended(stream)
                continue
            if not self._replies:
                log.warning("a reply nobody waits for: %s", line[:200])
                continue
            pending = self._replies.popleft()
            pending.reply = parsed
            command = pending.command
            if (isinstance(parsed, ErrReply) and isinstance(command, Generate | Restore)
                    and command.seq is not None):
                refused = self._sequences.pop(command.seq, None)  # it never ran
                if refused is not None:
                    # Ends it for one that stopped waiting (_abandon): no record comes.
                    refused._done(parsed)
                    refused._end()
            pending.event.set()

    async def _read_stream(self) -> None:
        reader = FramedStreamReader()
        while True:
            data = await self.daemon.receive_stream()
            for item in reader.feed(data):
                stream = self._sequences.get(item.seq)
                if stream is None or stream._ended.is_set():
                    log.warning("stream record for sequence %d, which runs nothing here", item.seq)
                elif isinstance(item, SeqEnd):
                    stream._end()
                    self._release_if_ended(stream)
                else:
                    stream._record(item.values)

    def _release_if_ended(self, stream: SequenceStream) -> None:
        """Free the stream's sequence once both its end record and done line were read."""
        if stream.done and self._sequences.get(stream.seq) is stream:
            del self._sequences[stream.seq]

    def _break(self, error: BaseException) -> None:
        self._broken = error
        while self._replies:
            pending = self._replies.popleft()
            pending.failure = error
            pending.event.set()
        for stream in list(self._sequences.values()):
            stream._fail(error)
        self._sequences.clear()

    async def _read(self, reader: str) -> None:
        try:
            await (self._read_stdout() if reader == "stdout" else self._read_stream())
        except DaemonDiedError as error:
            self._break(error)
        except trio.Cancelled:
            raise
        except Exception as error:  # a protocol violation: nothing after it can be trusted
            log.error("%s daemon pid %d broke protocol 2: %s", self.daemon.role, self.daemon.pid,
                      error)
            self._break(self._refusal("protocol", str(error)))
            self.daemon.kill()


@asynccontextmanager
async def open_batch_client(daemon: DaemonProcess) -> AsyncIterator[BatchClient]:
    """Read ``daemon`` as a protocol 2 client for the duration of the block.

    Raises:
        ValueError: the daemon's ready line does not list protocol 2.
    """
    client = BatchClient(daemon)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client._read, "stdout")
        nursery.start_soon(client._read, "stream")
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()
