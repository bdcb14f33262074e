"""The Trio client that owns one running daemon: the typed command API.

``open_daemon`` spawns the native executable and waits for its ready line (through
``daemons.process``), then yields a ``DaemonClient``: one method per command of
PROTOCOL.md 5, taking and returning Python values. The client keeps exactly one command
in flight (``daemons.channel``), maps ``err`` replies to typed exceptions (and refuses,
as ``unsupported``, a command the ready line's capabilities do not list), and notices
the daemon's death whenever it happens: ``client.exited`` fires and every waiting or
future command raises ``DaemonDiedError`` instead of hanging. ``generate`` and
``restore`` yield a ``GenerationStream`` (``daemons.generation``).

Long prompts and texts go to the daemon as files in a scratch directory of the client's
own, removed when the daemon stops.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import tempfile
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path, PurePosixPath
from typing import Literal, TypedDict, Unpack

import numpy as np
import trio

from daemons.channel import CommandChannel
from daemons.generation import GenerationStream, open_generation
from daemons.process import DaemonProcess, describe_exit, open_daemon_process
from daemons.roles import DaemonLaunch
from protocol import (
    Command,
    Compress,
    Detokenize,
    Embed,
    EmbedSummary,
    ErrorCode,
    FreeSnapshot,
    Generate,
    InlineIds,
    InlineText,
    ListSlots,
    LoadSlot,
    OkReply,
    Park,
    ParkScope,
    ParkState,
    PieceTable,
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
    Unpark,
    Vocab,
    write_token_file,
)

__all__ = ["DaemonClient", "DecodeOptions", "GenerationStream", "describe_exit", "open_daemon"]

# Prompts longer than this go through a token file rather than inline ids, so a
# 128K-token prompt never becomes a megabyte-long command line; long texts (prompts to
# tokenize, grammars) go through a text file for the same reason.
_INLINE_IDS_MAX = 512
_INLINE_TEXT_MAX = 2048
# Reading an output file back from another host through its launcher.
_FETCH_TIMEOUT_S = 120.0


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
    prompt_logprobs: bool
    """``generate`` only, with ``logprobs``: every prompt token after the first gets its
    record too (``GenerationStream.read_prompt_logprobs``); the prefill then reuses no
    held state, and ``n_gen`` may be 0."""
    lookup: bool | None
    """Prompt lookup on or off for this request (PROTOCOL.md 5.9); None: the daemon's
    ``--lookup`` default. True needs a daemon started with ``--lookup=opt-in|on``."""
    seq: int | None
    """A ``--parallel`` daemon's sequence to run on, held with ``SlotClient.sequence``
    (orchestrator/slots.py); None: any free one. A one-sequence client reads it not."""


class DaemonClient:
    """A ready daemon. Use through ``open_daemon``; one command at a time."""

    def __init__(self, daemon: DaemonProcess, workdir: Path) -> None:
        self._daemon = daemon
        self._channel = CommandChannel(daemon)
        self._workdir = workdir
        self._files = 0

    # --- identity and state, from the process -----------------------------------------

    @property
    def launch(self) -> DaemonLaunch:
        return self._daemon.launch

    @property
    def process(self) -> trio.Process:
        return self._daemon.process

    @property
    def argv(self) -> list[str]:
        return self._daemon.argv

    @property
    def stream_bytes(self) -> int:
        """Bytes the daemon has written to its stream fd (tokens, mostly) so far."""
        return self._daemon.stream_bytes

    @property
    def ready(self) -> ReadyInfo | None:
        """The ready line (set once ``open_daemon`` yields the client)."""
        return self._daemon.ready

    @property
    def exited(self) -> trio.Event:
        """Set the moment the daemon exits, whatever the reason."""
        return self._daemon.exited

    @property
    def link_lost(self) -> str | None:
        """Why the client stopped a daemon on one channel (a silent link); None: it did not."""
        return self._daemon.link_lost

    @property
    def stderr_tail(self) -> deque[str]:
        """The daemon's last lines of stderr."""
        return self._daemon.stderr_tail

    @property
    def role(self) -> str:
        return self._daemon.role

    @property
    def pid(self) -> int:
        return self._daemon.pid

    @property
    def returncode(self) -> int | None:
        return self._daemon.returncode

    @property
    def intentional_exit(self) -> bool:
        """True when the daemon exited because we asked it to (``quit`` or shutdown)."""
        return self._daemon.intentional_exit

    async def aclose(self) -> None:
        """Quit, then escalate to SIGTERM and SIGKILL on the process group; always reap."""
        await self._daemon.aclose()

    # --- arguments that may go by file ----------------------------------------------

    def _scratch_path(self, suffix: str) -> Path:
        self._files += 1
        return self._workdir / f"{self._files:06d}{suffix}"

    @property
    def _remote(self) -> bool:
        """The daemon runs on another host: inputs go inline, outputs come back by launcher."""
        return self.launch.scratch_dir is not None

    def _output_path(self, suffix: str) -> Path | PurePosixPath:
        """Where the daemon writes a command's output file, on its own host."""
        if self.launch.scratch_dir is None:
            return self._scratch_path(suffix)
        return self.launch.scratch_dir / f"lucerna-{uuid.uuid4().hex}{suffix}"

    async def _take_output(self, path: Path | PurePosixPath) -> bytes:
        """The bytes of an output file, which is removed; through the launcher if remote."""
        if isinstance(path, Path):
            try:
                return path.read_bytes()
            finally:
                path.unlink(missing_ok=True)
        launch = self.launch
        script = f"cat {shlex.quote(str(path))} && rm -f {shlex.quote(str(path))}"
        words = ["sh", "-c", script]
        argv = [*launch.launcher,
                *([shlex.quote(word) for word in words] if launch.remote_shell else words)]
        with trio.fail_after(_FETCH_TIMEOUT_S):
            result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True,
                                            check=False)
        if result.returncode != 0:
            raise self._channel.refusal(
                ErrorCode.IO_FAILED.value, f"could not read {path} back from host {launch.host!r}: "
                f"{result.stderr.decode(errors='replace').strip()[-300:]}")
        return result.stdout

    def _ids_ref(self, ids: Sequence[int]) -> InlineIds | TokenFile:
        if len(ids) <= _INLINE_IDS_MAX or self._remote:
            return InlineIds(tuple(ids))
        path = self._scratch_path(".ids")
        write_token_file(path, ids)
        return TokenFile(path)

    def _text_ref(self, text: str) -> InlineText | TextFile:
        if len(text) <= _INLINE_TEXT_MAX or self._remote:
            return InlineText(text)
        path = self._scratch_path(".txt")
        path.write_text(text, encoding="utf-8")
        return TextFile(path)

    async def _command(self, command: Command) -> OkReply:
        return await self._channel.run(command)

    async def _stream_command(self, command: Command) -> tuple[list[int], OkReply]:
        return await self._channel.run_stream(command)

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
        path = self._output_path(".msgpack")
        await self._command(Vocab(path))
        return PieceTable.from_bytes(await self._take_output(path))

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
        command = self._decode_command(slot, prompt, n_gen, options)
        async with open_generation(self._channel, command, len(prompt)) as stream:
            yield stream

    def _decode_command(self, slot: int | None, prompt: Sequence[int], n_gen: int,
                        options: DecodeOptions) -> Generate | Restore:
        """The ``generate`` (``slot`` None) or ``restore`` line of ``options``."""
        grammar = options.get("grammar")
        json_schema = options.get("json_schema")
        build: Callable[..., Generate | Restore] = (
            functools.partial(Generate, reuse=options.get("reuse", True),
                              marks=tuple(options.get("marks", ())),
                              prompt_logprobs=options.get("prompt_logprobs", False))
            if slot is None else functools.partial(Restore, slot))
        return build(
            self._ids_ref(prompt),
            n_gen,
            options.get("sampling"),
            stop=tuple(options.get("stop", ())),
            ignore_eos=options.get("ignore_eos", False),
            grammar=None if grammar is None else self._text_ref(grammar),
            json_schema=None if json_schema is None else self._text_ref(json_schema),
            snap=options.get("snap"),
            logprobs=options.get("logprobs"),
            lookup=options.get("lookup"),
        )

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
        segment: int | None = None,
    ) -> list[int]:
        """The ids the pflash drafter keeps of ``ids``, in their order (PROTOCOL.md 5.7)."""
        command = Compress(self._ids_ref(ids), keep_x1000, lookahead=lookahead, chunk=chunk,
                           pool=pool, segment=segment)
        kept, _ = await self._stream_command(command)
        return kept

    async def embed(self, inputs: Sequence[Sequence[int]], *,
                    pooling: Literal["mean", "last"] = "mean") -> np.ndarray:
        """Each input's pooled hidden states, one float32 row per input (PROTOCOL.md 5.11).

        One command for all inputs. The daemon clears its live sequence to do it, so the
        next generation reuses no prefix from it (snapshot slots stay).
        """
        path = self._output_path(".f32")
        flat = [token for one in inputs for token in one]
        command = Embed(self._ids_ref(flat), path, tuple(len(one) for one in inputs), pooling)
        summary = EmbedSummary.from_reply(await self._command(command))
        rows = np.frombuffer(await self._take_output(path), dtype="<f4")
        if rows.size != summary.n * summary.dim or summary.n != len(inputs):
            raise self._channel.refusal("protocol",
                                        f"embed wrote {rows.size} floats for {summary}")
        return rows.reshape(summary.n, summary.dim)


@asynccontextmanager
async def open_daemon(
    launch: DaemonLaunch, *, ready_timeout: float = 600.0
) -> AsyncIterator[DaemonClient]:
    """Spawn a daemon, wait for its ready line, yield the client, always clean up."""
    workdir = Path(tempfile.mkdtemp(prefix=f"lucerna-{launch.role.name}-"))
    try:
        async with open_daemon_process(launch, ready_timeout=ready_timeout) as daemon:
            yield DaemonClient(daemon, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
