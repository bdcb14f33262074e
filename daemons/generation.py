"""The stream of one ``generate`` or ``restore``: tokens as they land, then the summary.

``open_generation`` sends the command and holds the channel's lock while the caller
iterates the ``GenerationStream``. Leaving the block before the stream is done (a stop
string matched, the client went away, the task was cancelled) sends ``cancel`` and
drains the stream to its ``-1`` and reply, so the daemon is at a command boundary for
the next command; a daemon that cannot be brought there is killed.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from daemons.channel import CommandChannel
from daemons.errors import DaemonDiedError
from protocol import (
    Cancel,
    Generate,
    GenerateSummary,
    LogprobStreamReader,
    OkReply,
    Restore,
    TokenLogprobs,
    TokenStreamReader,
)

__all__ = ["CANCEL_DRAIN_S", "GenerationStream", "open_generation"]

log = logging.getLogger("lucerna.daemon")

CANCEL_DRAIN_S = 30.0
"""How long a cancelled generation may take to reach its end before its daemon is killed
(daemons/batch.py waits as long for one sequence)."""


class GenerationStream:
    """Tokens of one ``generate`` or ``restore`` as they arrive; ``summary`` once finished."""

    def __init__(self, channel: CommandChannel, command: Generate | Restore,
                 n_prompt: int = 0) -> None:
        self._channel = channel
        self._reply_to = command.name
        # A generation that asked for logprobs streams records, whose ids go where
        # bare ids go and whose records wait in _records.
        self._ids = TokenStreamReader()
        self._records_reader = (None if command.logprobs is None
                                else LogprobStreamReader(command.logprobs))
        self._pending: deque[int] = deque()
        self._records: deque[TokenLogprobs] = deque()
        # With prompt_logprobs the first n_prompt - 1 records are the prompt's.
        scoring = isinstance(command, Generate) and command.prompt_logprobs
        self._prompt_wanted = max(0, n_prompt - 1) if scoring else 0
        self.prompt_logprobs: list[TokenLogprobs] = []
        """The prompt tokens' records (every prompt token after the first), once
        ``read_prompt_logprobs`` returned; fewer when the generation was cancelled."""
        self.done = False
        """The reply has been read: the daemon is ready for the next command."""
        self.summary: GenerateSummary | None = None
        self.logprobs: TokenLogprobs | None = None
        """The record of the token the last ``__anext__`` returned, when the generation
        asked for logprobs; None otherwise."""

    async def read_prompt_logprobs(self) -> list[TokenLogprobs]:
        """Read up to the prompt tokens' records (``prompt_logprobs``), which come before
        any generated token; empty for a generation that did not ask for them."""
        while len(self.prompt_logprobs) < self._prompt_wanted and not self._stream_finished:
            await self._receive()
        return self.prompt_logprobs

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> int:
        while not self._pending:
            if self._stream_finished:
                if not self.done:
                    reply = await self._channel.receive_reply()
                    self.done = True
                    self.summary = GenerateSummary.from_reply(
                        self._channel.answer(reply, self._reply_to))
                raise StopAsyncIteration
            await self._receive()
        if self._records_reader is not None:
            self.logprobs = self._records.popleft()
        return self._pending.popleft()

    async def collect(self) -> list[int]:
        return [token async for token in self]

    @property
    def _stream_finished(self) -> bool:
        """The stream's ``-1`` has been read."""
        return (self._records_reader or self._ids).finished

    async def _receive(self) -> None:
        data = await self._channel.daemon.receive_stream()
        if self._records_reader is None:
            self._pending.extend(self._ids.feed(data))
            return
        records = self._records_reader.feed(data)
        if len(self.prompt_logprobs) < self._prompt_wanted:
            split = self._prompt_wanted - len(self.prompt_logprobs)
            self.prompt_logprobs += records[:split]
            records = records[split:]
        self._records.extend(records)
        self._pending.extend(record.token for record in records)

    async def _abandon(self) -> None:
        """Bring the daemon back to a command boundary after the caller left early."""
        channel, daemon = self._channel, self._channel.daemon
        with trio.CancelScope(shield=True):
            if daemon.exited.is_set():
                return
            try:
                with trio.fail_after(CANCEL_DRAIN_S):
                    replies = 1
                    if channel.serves("cancel"):
                        await daemon.send(Cancel().encode())
                        replies += 1
                    while not self._stream_finished:
                        await self._receive()
                    # Replies come in command order; an error reply can only be the
                    # generation's, since cancel always succeeds.
                    summary = None
                    for _ in range(replies):
                        reply = await channel.receive_reply()
                        if isinstance(reply, OkReply) and reply.command == self._reply_to:
                            summary = GenerateSummary.from_reply(reply)
                    self.done = True
                    if summary is not None:
                        log.info("%s daemon pid %d: %s left early; stopped after %d tokens (%s)",
                                 daemon.role, daemon.pid, self._reply_to, summary.n_gen,
                                 summary.finish.value)
            except (trio.TooSlowError, DaemonDiedError, trio.BrokenResourceError,
                    trio.ClosedResourceError):
                # A daemon that cannot be brought back to a clean command boundary is
                # of no use to the next request: kill it and let the supervisor see it.
                log.error("%s daemon pid %d did not stop its generation; killing it",
                          daemon.role, daemon.pid)
                daemon.kill()


@asynccontextmanager
async def open_generation(
    channel: CommandChannel, command: Generate | Restore, n_prompt: int = 0
) -> AsyncIterator[GenerationStream]:
    """Send ``command``, yield its stream; on leaving early, cancel and drain it.

    ``n_prompt`` is the prompt's length, which a ``prompt_logprobs`` stream needs to
    tell the prompt's records from the generated tokens' (the command may name a file).
    """
    channel.check_served(command)
    async with channel.lock:
        await channel.daemon.send(command.encode())
        stream = GenerationStream(channel, command, n_prompt)
        try:
            yield stream
        finally:
            if not stream.done:
                await stream._abandon()
