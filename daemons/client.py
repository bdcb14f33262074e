"""The Trio client that owns one running daemon.

``open_daemon`` spawns the native executable in its own process group, waits for
its ready line, and yields a ``DaemonClient``. The client keeps exactly one
command in flight (PROTOCOL.md §7), reads the stream fd exactly, maps ``err``
replies to typed exceptions (and refuses, as ``unsupported``, a command the ready
line's capabilities do not list), and notices the daemon's death whenever it happens:
``client.exited`` fires and every waiting or future command raises
``DaemonDiedError`` instead of hanging.

Shutdown follows trio's ``open_process`` shape: ask politely (``quit``), wait,
then SIGTERM and SIGKILL the whole process group, inside a shielded cancel scope,
always reaping the child.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Literal, TypedDict, Unpack

import numpy as np
import trio

from daemons.errors import DaemonDiedError, DaemonReplyError, DaemonStartError
from daemons.roles import DaemonLaunch
from protocol import (
    Cancel,
    Command,
    Compress,
    Detokenize,
    Embed,
    EmbedSummary,
    ErrReply,
    FreeSnapshot,
    Generate,
    GenerateSummary,
    InlineIds,
    InlineText,
    ListSlots,
    LoadSlot,
    LogprobStreamReader,
    OkReply,
    Park,
    ParkScope,
    ParkState,
    PieceTable,
    Quit,
    ReadyInfo,
    Restore,
    SamplingParams,
    SaveSlot,
    SlotList,
    Snapshot,
    SnapshotInfo,
    Stats,
    TextFile,
    TokenFile,
    Tokenize,
    TokenLogprobs,
    TokenStreamReader,
    Unpark,
    Vocab,
    parse_reply_line,
    parse_startup_line,
    write_token_file,
)

__all__ = ["DaemonClient", "DecodeOptions", "GenerationStream", "open_daemon"]

log = logging.getLogger("lucerna.daemon")

# Prompts longer than this go through a token file rather than inline ids, so a
# 128K-token prompt never becomes a megabyte-long command line; long texts (prompts to
# tokenize, grammars) go through a text file for the same reason.
_INLINE_IDS_MAX = 512
_INLINE_TEXT_MAX = 2048
_STDERR_TAIL_LINES = 40
_QUIT_GRACE_S = 5.0
_TERM_GRACE_S = 5.0
_CANCEL_DRAIN_S = 30.0


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
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._buffer += chunk


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


class DecodeOptions(TypedDict, total=False):
    """Keyword options of ``DaemonClient.generate`` and ``restore`` (PROTOCOL.md 5.1).

    Each one left out takes the daemon's default.
    """

    sampling: SamplingParams | None
    """How tokens are picked; greedy by default."""
    stop: Sequence[int]
    """Token ids that end the generation (the stop token is streamed)."""
    ignore_eos: bool
    """Do not stop at end-of-generation tokens."""
    grammar: str | None
    """GBNF text every sampled token must satisfy (long grammars go via a file)."""
    json_schema: str | None
    """A JSON schema (as JSON text) the output must satisfy; exclusive with grammar."""
    snap: tuple[int, int] | None
    """``(L, S)``: snapshot into slot ``S`` once the first ``L`` prompt tokens are in;
    pick ``L`` a multiple of the daemon's ``--chunk`` for an exact restore (5.5)."""
    reuse: bool
    """``generate`` only: start from the longest prefix of the prompt whose state the
    daemon holds (5.10; the daemon's default). False prefills from an empty sequence."""
    marks: Sequence[int]
    """``generate`` only: prompt positions where the prefill splits and keeps a checkpoint."""
    logprobs: int | None
    """``K`` in ``0..20``: each token comes with its log-probability and the ``K`` most
    likely alternatives' (``GenerationStream.logprobs``, PROTOCOL.md 5.1)."""


class DaemonClient:
    """A ready daemon. Use through ``open_daemon``; one command at a time."""

    def __init__(
        self,
        launch: DaemonLaunch,
        process: trio.Process,
        argv: Sequence[str],
        stream: trio.lowlevel.FdStream,
        workdir: Path,
    ) -> None:
        self.launch = launch
        self.process = process
        self.argv = list(argv)
        self.ready: ReadyInfo | None = None
        self.exited = trio.Event()
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._stream = stream
        self._tokens = TokenStreamReader()
        # Set for a generation that asked for logprobs: its stream is records, whose
        # ids go where bare ids go and whose records wait in _records.
        self._logprobs: LogprobStreamReader | None = None
        self._records: deque[TokenLogprobs] = deque()
        self._workdir = workdir
        self._files = 0
        self._lock = trio.Lock()
        self._reply_send, self._reply_recv = trio.open_memory_channel[bytes](16)
        self._quitting = False

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

    def _died(self) -> DaemonDiedError:
        tail = "; ".join(list(self.stderr_tail)[-3:])
        return DaemonDiedError(
            f"daemon {describe_exit(self.process.returncode)}"
            + (f" (last stderr: {tail})" if tail else ""),
            role=self.role,
            pid=self.pid,
            argv=self.argv,
            returncode=self.process.returncode,
        )

    # --- background tasks -----------------------------------------------------------

    async def _pump_stdout(self, reader: _LineReader) -> None:
        async with self._reply_send:
            while (line := await reader.readline()) is not None:
                await self._reply_send.send(line)

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

    # --- wire helpers ---------------------------------------------------------------

    async def _send(self, line: bytes) -> None:
        if self.exited.is_set():
            raise self._died()
        assert self.process.stdin is not None
        try:
            await self.process.stdin.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self._await_exit_briefly()
            raise self._died() from None

    async def _await_exit_briefly(self) -> None:
        # The pipes break a moment before the kernel reports the exit status; wait a
        # little so the error can say "killed by SIGKILL" rather than "still running".
        with trio.move_on_after(2):
            await self.exited.wait()

    async def _read_reply(self) -> OkReply | ErrReply:
        try:
            line = await self._reply_recv.receive()
        except trio.EndOfChannel:
            await self._await_exit_briefly()
            raise self._died() from None
        return parse_reply_line(line.decode("utf-8", errors="replace"))

    async def _read_stream_chunk(self) -> list[int]:
        data = await self._stream.receive_some(65536)
        if not data:
            await self._await_exit_briefly()
            raise self._died()
        if self._logprobs is not None:
            records = self._logprobs.feed(data)
            self._records.extend(records)
            return [record.token for record in records]
        return self._tokens.feed(data)

    @property
    def _stream_finished(self) -> bool:
        """The current stream command's ``-1`` has been read."""
        return (self._logprobs or self._tokens).finished

    def _reply_error(self, reply: ErrReply) -> DaemonReplyError:
        return DaemonReplyError(reply.code, reply.detail, role=self.role, pid=self.pid,
                                argv=self.argv)

    def _scratch_path(self, suffix: str) -> Path:
        self._files += 1
        return self._workdir / f"{self._files:06d}{suffix}"

    def _ids_ref(self, ids: Sequence[int]) -> InlineIds | TokenFile:
        if len(ids) <= _INLINE_IDS_MAX:
            return InlineIds(tuple(ids))
        path = self._scratch_path(".ids")
        write_token_file(path, ids)
        return TokenFile(path)

    def _text_ref(self, text: str) -> InlineText | TextFile:
        if len(text) <= _INLINE_TEXT_MAX:
            return InlineText(text)
        path = self._scratch_path(".txt")
        path.write_text(text, encoding="utf-8")
        return TextFile(path)

    def _answer(self, reply: OkReply | ErrReply, expect: str) -> OkReply:
        """The ``ok`` reply to ``expect``; an ``err`` reply raises DaemonReplyError."""
        if isinstance(reply, ErrReply):
            raise self._reply_error(reply)
        if reply.command != expect:
            raise DaemonReplyError("protocol", f"expected a reply to {expect}, got {reply}",
                                   role=self.role, pid=self.pid, argv=self.argv)
        return reply

    def _check_served(self, command: Command) -> None:
        """Refuse a command the ready line does not list, as the daemon would (``unsupported``).

        Asking anyway is not only wasted: a daemon of an older protocol answers a stream
        command it does not know without ending its stream, which would hang the reader.
        """
        if self.ready is not None and command.name not in self.ready.capabilities:
            raise DaemonReplyError(
                "unsupported",
                f"{command.name} is not in the capabilities of this daemon "
                f"({','.join(sorted(self.ready.capabilities))})",
                role=self.role, pid=self.pid, argv=self.argv)

    async def _command(self, command: Command) -> OkReply:
        self._check_served(command)
        async with self._lock:
            await self._send(command.encode())
            reply = await self._read_reply()
        return self._answer(reply, command.name)

    async def _stream_command(self, command: Command) -> tuple[list[int], OkReply]:
        self._check_served(command)
        async with self._lock:
            await self._send(command.encode())
            self._tokens.reset()
            self._logprobs = None
            values: list[int] = []
            while not self._tokens.finished:
                values.extend(await self._read_stream_chunk())
            reply = await self._read_reply()
        return values, self._answer(reply, command.name)

    # --- commands -------------------------------------------------------------------

    async def tokenize(self, text: str, *, special: bool = True,
                       add_bos: bool | None = None) -> list[int]:
        ids, _ = await self._stream_command(
            Tokenize(self._text_ref(text), special=special, add_bos=add_bos))
        return ids

    async def detokenize(self, ids: Sequence[int], *, special: bool = False) -> str:
        reply = await self._command(Detokenize(self._ids_ref(ids), special=special))
        return reply.fields.get("text", "")

    async def piece_table(self) -> PieceTable:
        path = self._scratch_path(".msgpack")
        await self._command(Vocab(path))
        table = PieceTable.from_file(path)
        path.unlink(missing_ok=True)
        return table

    async def stats(self, path: str | os.PathLike[str] | None = None) -> dict[str, str]:
        """The ``ok stats`` fields (PROTOCOL.md 5.3); with ``path``, also as msgpack there."""
        return (await self._command(Stats(path))).fields

    def generate(
        self, prompt: Sequence[int], n_gen: int, **options: Unpack[DecodeOptions]
    ) -> AbstractAsyncContextManager[GenerationStream]:
        """Run one generation; iterate the yielded stream for tokens as they land.

        ``options`` are those of :class:`DecodeOptions`. Leaving the block early (a stop
        string matched, the client went away, the task was cancelled) sends ``cancel``
        and drains the stream, so the daemon is ready for the next command.
        """
        return self._decode(None, prompt, n_gen, options)

    def restore(
        self, slot: int, prompt: Sequence[int], n_gen: int, **options: Unpack[DecodeOptions]
    ) -> AbstractAsyncContextManager[GenerationStream]:
        """Like ``generate``, from the snapshot in ``slot``: only what it lacks is prefilled.

        The slot's tokens must be a prefix of ``prompt`` (else ``snapshot_mismatch``); the
        stream's summary has ``n_reused``, the tokens taken from the slot.
        """
        return self._decode(slot, prompt, n_gen, options)

    @asynccontextmanager
    async def _decode(
        self, slot: int | None, prompt: Sequence[int], n_gen: int, options: DecodeOptions
    ) -> AsyncIterator[GenerationStream]:
        """The one path of ``generate`` and ``restore``: send, stream, always end clean."""
        grammar = options.get("grammar")
        json_schema = options.get("json_schema")
        build: Callable[..., Generate | Restore] = (
            functools.partial(Generate, reuse=options.get("reuse", True),
                              marks=tuple(options.get("marks", ())))
            if slot is None else functools.partial(Restore, slot))
        command = build(
            self._ids_ref(prompt),
            n_gen,
            options.get("sampling"),
            stop=tuple(options.get("stop", ())),
            ignore_eos=options.get("ignore_eos", False),
            grammar=None if grammar is None else self._text_ref(grammar),
            json_schema=None if json_schema is None else self._text_ref(json_schema),
            snap=options.get("snap"),
            logprobs=options.get("logprobs"),
        )
        self._check_served(command)
        async with self._lock:
            await self._send(command.encode())
            self._tokens.reset()
            self._records.clear()
            self._logprobs = (None if command.logprobs is None
                              else LogprobStreamReader(command.logprobs))
            stream = GenerationStream(self, command.name)
            try:
                yield stream
            finally:
                if not stream.done:
                    await self._abandon(stream)

    async def snapshot(self, slot: int) -> SnapshotInfo:
        """Copy the live sequence into ``slot`` (PROTOCOL.md 5.5)."""
        return SnapshotInfo.from_reply(await self._command(Snapshot(slot)))

    async def save_slot(self, slot: int, path: str | os.PathLike[str]) -> int:
        """Write ``slot`` to a snapshot file at ``path`` (5.10); returns the file's bytes."""
        return (await self._command(SaveSlot(slot, path))).int_field("bytes")

    async def load_slot(self, slot: int, path: str | os.PathLike[str]) -> SnapshotInfo:
        """Read the snapshot file at ``path`` into ``slot``; ``bad_snapshot_file`` when it
        was taken by another model, engine or setting, or is truncated or corrupt."""
        return SnapshotInfo.from_reply(await self._command(LoadSlot(slot, path)))

    async def free_snapshot(self, slot: int) -> int:
        """Release ``slot``; returns the host bytes freed."""
        return (await self._command(FreeSnapshot(slot))).int_field("bytes")

    async def list_slots(self) -> SlotList:
        return SlotList.from_reply(await self._command(ListSlots()))

    async def park(self, which: ParkScope = "all") -> ParkState:
        """Release weights and context, keeping the process, tokenizer and slots (5.6)."""
        return ParkState.from_reply(await self._command(Park(which)))

    async def unpark(self, which: ParkScope = "all") -> ParkState:
        """Load the weights again; generation is then identical to before the park."""
        return ParkState.from_reply(await self._command(Unpark(which)))

    async def compress(
        self,
        ids: Sequence[int],
        keep_x1000: int,
        *,
        lookahead: int | None = None,
        chunk: int | None = None,
        pool: int | None = None,
    ) -> list[int]:
        """The ids the pflash drafter keeps of ``ids``, in their order (PROTOCOL.md 5.7)."""
        command = Compress(self._ids_ref(ids), keep_x1000, lookahead=lookahead, chunk=chunk,
                           pool=pool)
        kept, _ = await self._stream_command(command)
        return kept

    async def embed(self, inputs: Sequence[Sequence[int]], *,
                    pooling: Literal["mean", "last"] = "mean") -> np.ndarray:
        """Each input's pooled hidden states, one float32 row per input (PROTOCOL.md 5.11).

        One command for all inputs. The daemon clears its live sequence to do it, so the
        next generation reuses no prefix from it (snapshot slots stay).
        """
        path = self._scratch_path(".f32")
        flat = [token for one in inputs for token in one]
        command = Embed(self._ids_ref(flat), path, tuple(len(one) for one in inputs), pooling)
        summary = EmbedSummary.from_reply(await self._command(command))
        try:
            rows = np.fromfile(path, dtype="<f4")
        finally:
            path.unlink(missing_ok=True)
        if rows.size != summary.n * summary.dim or summary.n != len(inputs):
            raise DaemonReplyError("protocol", f"embed wrote {rows.size} floats for {summary}",
                                   role=self.role, pid=self.pid, argv=self.argv)
        return rows.reshape(summary.n, summary.dim)

    async def _abandon(self, stream: GenerationStream) -> None:
        with trio.CancelScope(shield=True):
            if self.exited.is_set():
                return
            try:
                with trio.fail_after(_CANCEL_DRAIN_S):
                    replies = 1
                    if self.ready is not None and "cancel" in self.ready.capabilities:
                        assert self.process.stdin is not None
                        await self.process.stdin.send_all(Cancel().encode())
                        replies += 1
                    while not self._stream_finished:
                        await self._read_stream_chunk()
                    # Replies come in command order; an error reply can only be the
                    # generation's, since cancel always succeeds.
                    summary = None
                    for _ in range(replies):
                        reply = await self._read_reply()
                        if isinstance(reply, OkReply) and reply.command == stream._reply_to:
                            summary = GenerateSummary.from_reply(reply)
                    stream.done = True
                    if summary is not None:
                        log.info("%s daemon pid %d: %s left early; stopped after %d tokens (%s)",
                                 self.role, self.pid, stream._reply_to, summary.n_gen,
                                 summary.finish.value)
            except (trio.TooSlowError, DaemonDiedError, trio.BrokenResourceError,
                    trio.ClosedResourceError):
                # A daemon that cannot be brought back to a clean command boundary is
                # of no use to the next request: kill it and let the supervisor see it.
                log.error("%s daemon pid %d did not stop its generation; killing it",
                          self.role, self.pid)
                self._kill_group(signal.SIGKILL)

    # --- lifecycle ------------------------------------------------------------------

    def _kill_group(self, sig: signal.Signals) -> None:
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
                self._kill_group(sig)
                with trio.move_on_after(_TERM_GRACE_S):
                    await self.process.wait()
            await self.process.wait()
            log.info("%s daemon pid %d stopped: it %s", self.role, self.pid,
                     describe_exit(self.process.returncode))
            self.exited.set()
            # Members of the group that outlived the leader (none expected) go too.
            self._kill_group(signal.SIGKILL)
            await self._stream.aclose()
            shutil.rmtree(self._workdir, ignore_errors=True)


class GenerationStream:
    """Tokens of one ``generate`` or ``restore`` as they arrive; ``summary`` once finished."""

    def __init__(self, client: DaemonClient, command: str) -> None:
        self._client = client
        self._reply_to = command
        self._pending: deque[int] = deque()
        self.done = False
        self.summary: GenerateSummary | None = None
        self.logprobs: TokenLogprobs | None = None
        """The record of the token the last ``__anext__`` returned, when the generation
        asked for logprobs; None otherwise."""

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> int:
        client = self._client
        while not self._pending:
            if client._stream_finished:
                if not self.done:
                    reply = await client._read_reply()
                    self.done = True
                    self.summary = GenerateSummary.from_reply(
                        client._answer(reply, self._reply_to))
                raise StopAsyncIteration
            self._pending.extend(await client._read_stream_chunk())
        if client._logprobs is not None:
            self.logprobs = client._records.popleft()
        return self._pending.popleft()

    async def collect(self) -> list[int]:
        return [token async for token in self]


@asynccontextmanager
async def open_daemon(
    launch: DaemonLaunch, *, ready_timeout: float = 600.0
) -> AsyncIterator[DaemonClient]:
    """Spawn a daemon, wait for its ready line, yield the client, always clean up."""
    read_fd, write_fd = os.pipe()
    argv = launch.argv(stream_fd=write_fd)
    # On an engine assert ggml runs gdb for a backtrace, and gdb then reads the daemon's
    # stdin, which we hold open: the dying daemon hung until its request timed out
    # (seen: 600 s). Without the backtrace it aborts at once and is restarted.
    env = {"GGML_NO_BACKTRACE": "1", **os.environ, **launch.env}
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            start_new_session=True,  # own process group: we signal the whole group
            env=env,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise DaemonStartError(f"could not execute {argv[0]}: {exc}", role=launch.role.name,
                               pid=None, argv=argv) from exc
    os.close(write_fd)  # the child holds the only write end, so its death is EOF here
    workdir = Path(tempfile.mkdtemp(prefix=f"lucerna-{launch.role.name}-"))
    client = DaemonClient(launch, process, argv, trio.lowlevel.FdStream(read_fd), workdir)
    assert process.stdout is not None and process.stderr is not None
    log.info("started %s daemon pid %d: %s", launch.role.name, process.pid, " ".join(argv))
    # Errors from the caller's block (and from startup) are caught inside the nursery
    # and re-raised after it, so callers see DaemonDiedError itself, not an
    # ExceptionGroup wrapping it.
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._pump_stdout, _LineReader(process.stdout))
            nursery.start_soon(client._pump_stderr, process.stderr)
            nursery.start_soon(client._watch_exit)
            try:
                client.ready = await _await_ready(client, ready_timeout)
                log.info("%s daemon pid %d ready: arch=%s n_ctx=%d backend=%s", client.role,
                         client.pid, client.ready.arch, client.ready.n_ctx, client.ready.backend)
                yield client
            except BaseException as exc:
                failure = exc
            finally:
                await client.aclose()
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
    finally:
        if process.returncode is None:  # only when open_nursery itself failed
            with trio.CancelScope(shield=True):
                client._kill_group(signal.SIGKILL)
                await process.wait()


async def _await_ready(client: DaemonClient, limit_s: float) -> ReadyInfo:
    def failure(message: str) -> DaemonStartError:
        tail = "\n".join(list(client.stderr_tail)[-8:])
        return DaemonStartError(message + (f"\nlast stderr lines:\n{tail}" if tail else ""),
                                role=client.role, pid=client.pid, argv=client.argv)

    with trio.move_on_after(limit_s) as scope:
        try:
            line = await client._reply_recv.receive()
        except trio.EndOfChannel:
            await client._await_exit_briefly()
            raise failure(f"daemon {describe_exit(client.returncode)} before its ready line"
                          ) from None
    if scope.cancelled_caught:
        raise failure(f"daemon did not print its ready line within {limit_s:.0f} s")
    first = parse_startup_line(line.decode("utf-8", errors="replace"))
    if isinstance(first, ErrReply):
        await client._await_exit_briefly()
        raise failure(f"daemon refused to start: {first.code}: {first.detail}")
    return first
