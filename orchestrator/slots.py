"""A model's daemon with several slots: continuous batching behind the DaemonClient API.

With ``parallel = N`` (> 1) a model's daemon runs ``--parallel N+S`` (``S`` spare
sequences, ``spare_sequences``) and speaks protocol 2 (PROTOCOL.md 9): up to N
generations share its steps, and the spare sequences keep the conversations of earlier
turns where they ran, for the prefix cache to continue there. ``open_slot_client`` starts it and
yields a ``SlotClient``, a ``DaemonClient`` whose

- ``generate`` and ``restore`` take a free slot (a daemon sequence), run there as a
  ``daemons.batch.SequenceStream`` and free it when the block is left (leaving early
  cancels that sequence alone, ``cancel <seq>``). The prefix cache picks the sequence
  instead (the one that holds the most of the prompt): it holds one with ``sequence``
  and passes it as the ``seq`` option, and ``snapshot_sequence`` copies an idle one's
  state into a snapshot slot (PROTOCOL.md 9.3). This is the seam of the generation
  core (``orchestrator.generation.generate_events``): it calls ``client.generate``
  whichever client the supervisor holds, so streaming, stop strings, disconnects and
  resume-after-crash are one loop for both;
- other commands (``vocab``, ``stats``, ``park``, ``embed`` ...) go through
  ``BatchClient.run``; those the daemon runs only between generations (9.3) wait for
  the running ones to end;
- ``tokenize`` goes to a second daemon of the same model, the **tokenizer**: a daemon
  tokenizes only between generations (a version 1 stream command waits, 9.3), so a
  request that arrives while N others stream would wait for all of them before its
  prompt could even be read. The tokenizer runs on the CPU and starts parked
  (``--parked=on``, PROTOCOL.md 5.6: the vocabulary alone is loaded, never the weights
  or a context), so it costs a process and its vocabulary (50 MiB resident for the
  default model).

The supervisor watches ``exited`` of the generating daemon; the tokenizer dying kills
it too, so both come back together.

How many requests run is the model's ``RequestQueue`` (``parallel`` turns); the free
slot list here only maps turns onto sequence numbers, all ``N+S`` of them.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import trio

from daemons.batch import BatchClient, SequenceStream, open_batch_client
from daemons.client import DaemonClient, DecodeOptions, open_daemon
from daemons.process import DaemonProcess, open_daemon_process
from daemons.roles import DaemonLaunch
from protocol import Command, OkReply, Snapshot, SnapshotInfo

__all__ = ["TOKENIZER_N_CTX", "SlotClient", "open_model_daemon", "open_slot_client",
           "tokenizer_launch"]

log = logging.getLogger("lucerna.slots")

TOKENIZER_N_CTX = 64
"""The tokenizer daemon's ``n_ctx``: it starts parked and never decodes, so no context is
ever made; were it unparked, a tiny one."""


def tokenizer_launch(launch: DaemonLaunch) -> DaemonLaunch:
    """The tokenizer of a model launched as ``launch``: same file and role, one sequence,
    no draft, on the CPU, a tiny context, one thread, started parked (its vocabulary
    alone: the weights are never read)."""
    return dataclasses.replace(launch, parallel=None, spare_sequences=None, checkpoint_mib=None,
                               n_ctx=TOKENIZER_N_CTX, threads=1,
                               n_gpu_layers=0, chunk=None, draft=None, draft_block_size=None,
                               slots=None, rpc=(), override_tensors=(), experts_in_host=None,
                               parked=True)


class SlotClient(DaemonClient):
    """A ``--parallel N`` daemon as a ``DaemonClient``. Use through ``open_slot_client``."""

    def __init__(self, daemon: DaemonProcess, workdir: Path, batch: BatchClient,
                 tokenizer: DaemonClient) -> None:
        super().__init__(daemon, workdir)
        self.batch = batch
        self.tokenizer = tokenizer
        self.parallel = batch.parallel
        """The daemon's sequences, spare ones included (``DaemonLaunch.daemon_sequences``)."""
        self._free = list(range(batch.parallel))
        self._freed = trio.Event()
        self._held: set[int] = set()
        """Sequences held with ``sequence``: a ``generate`` on one of them neither takes
        nor gives back a slot."""

    @property
    def slots_busy(self) -> int:
        """Slots with a generation that has not ended."""
        return self.parallel - len(self._free)

    async def _command(self, command: Command) -> OkReply:
        return await self.batch.run(command)

    async def _stream_command(self, command: Command) -> tuple[list[int], OkReply]:
        raise ValueError(f"{command.name} is a version 1 stream command, which a "
                         "--parallel daemon runs only between generations; "
                         "SlotClient sends it nowhere")

    async def tokenize(self, text: str, *, special: bool = True,
                       add_bos: bool | None = None) -> list[int]:
        return await self.tokenizer.tokenize(text, special=special, add_bos=add_bos)

    async def _take_slot(self, choose: Callable[[Sequence[int]], int] | None = None) -> int:
        # The model's queue lets at most ``parallel`` requests run, and each frees its
        # slot before its turn ends, so this waits only in the instant between the two.
        while not self._free:
            await self._freed.wait()
        seq = self._free[0] if choose is None else choose(tuple(self._free))
        self._free.remove(seq)
        return seq

    @asynccontextmanager
    async def sequence(self, choose: Callable[[Sequence[int]], int] | None = None
                       ) -> AsyncIterator[int]:
        """Hold a free sequence (``choose`` picks among the free ones, given in order)
        for the block; pass it as ``generate``'s ``seq`` option, any number of times."""
        seq = await self._take_slot(choose)
        self._held.add(seq)
        try:
            yield seq
        finally:
            self._held.discard(seq)
            self._give_back(seq)

    async def snapshot_sequence(self, slot: int, seq: int) -> SnapshotInfo:
        """``snapshot <slot> seq=S``: copy sequence ``seq``'s state into ``slot``
        (PROTOCOL.md 9.3); a sequence that is generating is ``seq_busy`` (hold it with
        ``sequence`` first to be sure it is not)."""
        return SnapshotInfo.from_reply(await self.batch.run(Snapshot(slot, seq=seq)))

    def _give_back(self, seq: int) -> None:
        self._free.append(seq)
        self._free.sort()
        self._freed.set()
        self._freed = trio.Event()

    @asynccontextmanager
    async def _decode(  # type: ignore[override]
        self, slot: int | None, prompt: Sequence[int], n_gen: int, options: DecodeOptions
    ) -> AsyncIterator[SequenceStream]:
        """``generate`` or ``restore`` on a free slot, or on the held sequence the ``seq``
        option names; leaving early cancels that sequence only."""
        command = self._decode_command(slot, prompt, n_gen, options)
        held = options.get("seq")
        if held is not None and held not in self._held:
            raise ValueError(f"seq={held} is not held: hold it with sequence() first")
        seq = await self._take_slot() if held is None else held
        try:
            async with self.batch.open_sequence(dataclasses.replace(command, seq=seq),
                                                len(prompt)) as stream:
                yield stream
        finally:
            if held is None:
                self._give_back(seq)


class _Tokenizer:
    """A model's tokenizer daemon, held open by a task of its own so that it starts beside
    the model's daemon: a (re)start waits for the slower of the two instead of their sum
    (for the default model on a CPU, the tokenizer's load and park took 1.4 s of a
    2.5 s restart, before it started parked: git show 7a0c96e:docs/benchmarks.md,
    "Restart after a kill")."""

    def __init__(self) -> None:
        self.client: DaemonClient | None = None
        self.failure: Exception | None = None
        self.settled = trio.Event()
        """Set once the tokenizer is ready, or failed to start."""
        self.release = trio.Event()
        """Set to stop it."""

    async def hold(self, launch: DaemonLaunch, ready_timeout: float) -> None:
        try:
            async with open_daemon(tokenizer_launch(launch), ready_timeout=ready_timeout) as client:
                self.client = client
                self.settled.set()
                await self.release.wait()
        except Exception as exc:  # raised by ``started`` in the task that opens the slots
            self.failure = exc
        finally:
            self.settled.set()

    async def started(self) -> DaemonClient:
        await self.settled.wait()
        if self.client is None:
            # Without a failure, its start was cancelled, and so is this task (the
            # tokenizer's nursery is cancelled only from outside, or after this returns).
            await trio.lowlevel.checkpoint()
            assert self.failure is not None
            raise self.failure
        return self.client


@asynccontextmanager
async def open_slot_client(launch: DaemonLaunch, *,
                           ready_timeout: float = 600.0) -> AsyncIterator[SlotClient]:
    """Start the tokenizer and the ``--parallel`` daemon of ``launch`` at once; always
    clean up (the daemon first). If either fails to start, the other is stopped and the
    caller gets that failure itself (the daemon's, where both failed), not an
    ExceptionGroup."""
    workdir = Path(tempfile.mkdtemp(prefix=f"lucerna-{launch.role.name}-slots-"))
    tokenizer = _Tokenizer()
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as tokenizer_nursery:
            tokenizer_nursery.start_soon(tokenizer.hold, launch, ready_timeout)
            try:
                async with open_daemon_process(launch, ready_timeout=ready_timeout) as daemon:
                    tokenizer_client = await tokenizer.started()
                    async with (open_batch_client(daemon) as batch,
                                trio.open_nursery() as nursery):

                        async def tokenizer_watch() -> None:
                            await tokenizer_client.exited.wait()
                            log.error("%s tokenizer daemon pid %d died; restarting the model's "
                                      "daemon with it", launch.role.name, tokenizer_client.pid)
                            daemon.kill()

                        nursery.start_soon(tokenizer_watch)
                        try:
                            yield SlotClient(daemon, workdir, batch, tokenizer_client)
                        finally:
                            nursery.cancel_scope.cancel()
            except BaseException as exc:
                failure = exc
                if tokenizer.client is None:  # still starting: no use for it now
                    tokenizer_nursery.cancel_scope.cancel()
            finally:
                tokenizer.release.set()
        if failure is not None:
            raise failure
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def open_model_daemon(launch: DaemonLaunch) -> AbstractAsyncContextManager[DaemonClient]:
    """``open_slot_client`` for ``parallel`` above 1, else ``open_daemon``."""
    if (launch.parallel or 1) > 1:
        return open_slot_client(launch)
    return open_daemon(launch)
