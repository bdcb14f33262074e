"""The fake daemon's process: startup, the stdin reader, the command loop, its death.

It follows native/src/daemon's shape. A reader task reads stdin line by line with
``protocol.parse_command`` (the reference reading of a line), records every line, acts on
a ``cancel`` the moment it is read (PROTOCOL.md 5.4, 9.3) and queues the rest. The main
loop answers them in order: a command that may run beside protocol 2 generations
(9.3) at once, any other after every running generation has ended, so stdout keeps one
reply per command in command order and done lines in between. Stream bytes go to the
stream pipe, or framed on stdout for a launch on one channel (section 10).
"""

from __future__ import annotations

import hashlib
import signal
from collections import Counter
from dataclasses import dataclass, field

import trio

from daemons.roles import DEFAULT_SLOTS, DaemonLaunch
from protocol import (
    PROTOCOL_VERSION,
    STREAM_END,
    Cancel,
    Command,
    CommandError,
    ErrReply,
    Generate,
    OkReply,
    ReadyInfo,
    Restore,
    encode_alive,
    encode_line,
    encode_stream_frame,
    encode_token_bytes,
    parse_command,
    parse_command_line,
    parse_startup_line,
)
from tests.native.sources import doc_capabilities

from ._behaviour import Behaviour, Death
from ._pipes import FakeProcess
from ._state import Decoded, Held

__all__ = ["FakeDaemon", "Run"]

DEFAULT_N_CTX = 4096
_STREAM_WORDS = frozenset({"generate", "restore", "tokenize", "compress"})
# PROTOCOL.md 9.3: what a daemon answers between the steps of running generations.
_ALONGSIDE = frozenset({"cancel", "stats", "list_slots", "free_snapshot", "save_slot",
                        "load_slot", "detokenize", "vocab"})


@dataclass
class Run:
    """A ``generate`` or ``restore`` from the moment it is read until its reply."""

    command: Generate | Restore
    seq: int
    cancelled: bool = False
    finished: bool = False


@dataclass(frozen=True)
class _Refused:
    """A line ``parse_command`` refused, with the ``err`` it earns."""

    line: bytes
    reply: ErrReply


@dataclass(frozen=True)
class _Cancelled:
    command: Cancel
    running: bool


_EOF = object()


@dataclass
class _Counters:
    requests: int = 0
    tokens_prompt: int = 0
    tokens_generated: int = 0
    cancelled: int = 0
    shared_prefixes: int = 0
    per_command: Counter[str] = field(default_factory=Counter)


class FakeDaemon:
    """One in-memory daemon, started by ``run`` (see the package docstring)."""

    def __init__(self, launch: DaemonLaunch, behaviour: Behaviour, argv: list[str]) -> None:
        self.launch = launch
        self.behaviour = behaviour
        self.argv = argv
        self.process = FakeProcess()
        self.received: list[bytes] = []
        """Every line read from stdin, in order (blank ones too)."""
        self.commands: list[Command] = []
        """Every line that parsed, in order."""
        self.decoded: list[Decoded] = []
        """Every ``generate`` and ``restore`` that ran, in the order they ended."""
        self.started_at = trio.current_time()
        self.ready: ReadyInfo | None = None
        self.role = launch.role.name
        self.parallel = launch.daemon_sequences if launch.parallel is not None else 1
        self.one_channel = launch.channel == "stdout"
        self.generates = self.role != "ds4_shard"
        self.capabilities = doc_capabilities()[self.role]
        limit = behaviour.n_ctx_train * self.parallel
        self.n_ctx = min(launch.n_ctx or DEFAULT_N_CTX, limit)
        self.parked = launch.parked
        self.known_state = not launch.parked
        """The state identity is known: never parked since start, or unparked once (5.6)."""
        self.state_id = hashlib.sha256(
            f"{launch.model}|{self.n_ctx}|{launch.chunk}|{launch.deterministic}|{launch.draft}"
            .encode()).hexdigest()[:16]
        self.held = Held(self.parallel, launch.slots or DEFAULT_SLOTS, behaviour.bytes_per_token,
                         share="--kv-unified=off" not in argv)
        self.counters = _Counters()
        self.runs: dict[int, Run] = {}
        """Generations that have not ended, by sequence (protocol 1's on 0)."""
        self._unfinished: list[Run] = []
        self._changed = trio.Event()
        self._queue_send, self._queue_recv = trio.open_memory_channel[object](float("inf"))
        self._stdout_lock = trio.Lock()
        self._stream_lock = trio.Lock()
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._serving = False
        self._terminating = False
        self._busy = False

    # --- what tests read ---------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    @property
    def lines(self) -> list[str]:
        """The lines read from stdin, decoded, blank ones left out."""
        return [raw.decode() for raw in self.received if raw.strip()]

    @property
    def words(self) -> list[str]:
        """The command word of every line that parsed, in order."""
        return [command.name for command in self.commands]

    async def wait_exited(self) -> int:
        return await self.process.wait()

    # --- signals, as the kernel delivers them --------------------------------------------

    def signal(self, sig: int) -> None:
        """SIGKILL ends it at once; SIGTERM cancels what runs and exits 0 once the running
        command has answered (PROTOCOL.md 1), or dies of it before the ready line."""
        if not self.alive:
            return
        if sig != signal.SIGTERM:
            self._exit(-sig)
        elif not self._serving:
            self._exit(-signal.SIGTERM)
        else:
            self._terminating = True
            for run in self._unfinished:
                run.cancelled = True
            if not self._busy and not self.runs:
                self._exit(0)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def _exit(self, returncode: int) -> None:
        # Its tasks stop first: none of them sees its own pipe ends close.
        self._scope.cancel()
        self.process.exit(returncode)

    async def die(self, death: Death) -> None:
        """Die as ``death`` says; never returns."""
        if death.stderr:
            await self.log(death.stderr)
        self._exit(death.returncode)
        await trio.sleep_forever()

    # --- writing ---------------------------------------------------------------------

    async def write_line(self, line: bytes) -> None:
        async with self._stdout_lock:
            await self.process.stdout_pipe.writer.send_all(line)

    async def write_stream(self, data: bytes) -> None:
        if self.one_channel:
            await self.write_line(encode_stream_frame(data))
            return
        async with self._stream_lock:
            await self.process.stream_pipe.writer.send_all(data)

    async def end_stream(self) -> None:
        await self.write_stream(encode_token_bytes([STREAM_END]))

    async def log(self, text: str) -> None:
        await self.process.stderr_pipe.writer.send_all(text.encode() + b"\n")

    def changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def all_ended(self) -> None:
        """Wait until no generation runs (the point a waiting command runs at, 9.3)."""
        while self.runs:
            await self._changed.wait()

    # --- life ------------------------------------------------------------------------

    async def run(self) -> None:
        """The process: start, serve, exit. Ends when it dies, however it dies."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                # Keep-alives from the start on, unless it never ran (a launcher that could
                # not reach its host, Startup.crash, writes nothing).
                if (self.one_channel and self.launch.keepalive_ms != 0
                        and self.behaviour.startup.kind != "exit"):
                    nursery.start_soon(self._keep_alive)
                await self._start()
                nursery.start_soon(self._read_commands)
                await self._serve()
                self._exit(0)

    async def _start(self) -> None:
        startup = self.behaviour.startup
        await self.log(f"fake: loading {self.launch.model}")
        await trio.sleep(startup.delay_s)
        if startup.kind == "hang":
            await trio.sleep_forever()
        if startup.kind == "exit":
            self._exit(1 if startup.status is None else startup.status)
            await trio.sleep_forever()
        if startup.kind == "refuse":
            refusal = ErrReply(startup.code, startup.detail)
            await self.write_line(refusal.encode())
            await self.log(f"fake: {startup.code}: {startup.detail}")
            code = refusal.error_code
            self._exit((code.exit_code if code is not None else None) or 3)
            await trio.sleep_forever()
        line = self.ready_line()
        ready = parse_startup_line(line)
        assert isinstance(ready, ReadyInfo)
        self.ready = ready
        await self.write_line(line)
        self._serving = True
        death = next((d for d in self.behaviour.deaths if d.on == "ready"), None)
        if death is not None:
            await self.die(death)

    def ready_line(self) -> bytes:
        """The ready line native/src/daemon/daemon.cpp writes, key for key, in its order."""
        vocab = self.behaviour.vocab
        pairs = {"protocol": str(PROTOCOL_VERSION)}
        if self.parallel > 1:
            pairs |= {"protocols": "1,2", "parallel": str(self.parallel)}
        pairs |= {
            "role": self.role, "arch": self.behaviour.arch, "vocab": str(vocab.n_vocab),
            "n_ctx": str(self.n_ctx), "n_ctx_train": str(self.behaviour.n_ctx_train),
            "bos": str(vocab.bos), "eos": str(vocab.eos), "add_bos": str(int(vocab.add_bos)),
            "backend": "cpu", "engine": "fake", "version": "0.1.0",
            "capabilities": ",".join(self.capabilities),
        }
        if self.launch.deterministic:
            pairs["deterministic"] = "1"
        if self.generates and self.parked:
            pairs["parked"] = "1"
        elif self.generates:
            pairs["state_id"] = self.state_id
        launch = self.launch
        spec = "+".join(name for name, on in (("dflash", launch.draft is not None),
                                             ("lookup", launch.lookup is not None)) if on)
        if spec:
            pairs |= {"spec": spec, "draft_block": str(launch.draft_block_size or 16)}
            if launch.draft_tree:
                pairs |= {"draft_tree": str(launch.draft_tree),
                          "draft_tree_branches": str(launch.draft_tree_branches or 8)}
            if launch.lookup is not None:
                pairs["lookup"] = launch.lookup
        if self.role == "ds4_shard":
            pairs |= {"rpc": self.launch.rpc_listen or "127.0.0.1:50052", "device": "CPU"}
        return encode_line(["ready"], pairs)

    async def _keep_alive(self) -> None:
        interval = (self.launch.keepalive_ms or 1000) / 1000
        while True:
            await self.write_line(encode_alive())
            await trio.sleep(interval)

    async def _read_commands(self) -> None:
        stdin = self.process.stdin_pipe.reader
        buffer = bytearray()
        while chunk := await stdin.receive_some():
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:newline]).rstrip(b"\r")
                del buffer[: newline + 1]
                self._read(line)
        self._queue_send.send_nowait(_EOF)  # EOF on stdin is quit (1)

    def _read(self, line: bytes) -> None:
        self.received.append(line)
        if not line.strip(b" "):
            return  # a blank line gets no reply
        try:
            command = parse_command(line)
        except CommandError as exc:
            self._queue_send.send_nowait(_Refused(line, ErrReply(exc.code, exc.message)))
            return
        self.commands.append(command)
        if isinstance(command, Cancel):
            # Acts the moment it is read; answered in command order.
            hit = [run for run in self._unfinished
                   if command.seq is None or (run.command.seq == command.seq)]
            for run in hit:
                run.cancelled = True
            self._queue_send.send_nowait(_Cancelled(command, bool(hit)))
            return
        if isinstance(command, Generate | Restore):
            run = Run(command, command.seq or 0)
            self._unfinished.append(run)
            self._queue_send.send_nowait(run)
            return
        self._queue_send.send_nowait(command)

    async def _serve(self) -> None:
        from ._commands import dispatch

        while True:
            item = await self._queue_recv.receive()
            if item is _EOF:
                await self.all_ended()
                return
            if not self._alongside(item):
                await self.all_ended()
            self._busy = True
            try:
                if isinstance(item, _Refused):
                    if _ends_a_stream(item.line):
                        await self.end_stream()
                    await self.write_line(item.reply.encode())
                elif isinstance(item, _Cancelled):
                    fields = {} if item.command.seq is None else {"seq": str(item.command.seq)}
                    await self.write_line(OkReply("cancel", fields | {
                        "running": str(int(item.running))}).encode())
                elif isinstance(item, Run):
                    await dispatch(self, item.command, item)
                elif await dispatch(self, item, None):  # type: ignore[arg-type]
                    return  # quit
            finally:
                self._busy = False
            if self._terminating and not self.runs:
                return

    def after_sequence(self) -> None:
        """A protocol 2 generation ended: a SIGTERM that waited for it exits now."""
        if self._terminating and not self.runs and not self._busy:
            self._exit(0)

    def finished(self, run: Run) -> None:
        run.finished = True
        if run in self._unfinished:
            self._unfinished.remove(run)

    @staticmethod
    def _alongside(item: object) -> bool:
        if isinstance(item, _Cancelled):
            return True
        if isinstance(item, Run):
            return item.command.seq is not None
        if isinstance(item, _Refused):
            return False
        name = getattr(item, "name", "")
        return name in _ALONGSIDE or (name == "snapshot" and getattr(item, "seq", None) is not None)

    def spawn(self, task: object, *args: object) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(task, *args)  # type: ignore[arg-type]


def _ends_a_stream(line: bytes) -> bool:
    """Whether a refused line still writes its ``-1``: a stream command's word, unless it
    names a sequence (a refused protocol 2 generation writes nothing, 9.2)."""
    try:
        parsed = parse_command_line(line)
    except Exception:  # unparseable: judged by its first word alone
        return line.split(b" ")[0].decode(errors="replace") in _STREAM_WORDS
    return parsed.command in _STREAM_WORDS and "seq" not in parsed.options
