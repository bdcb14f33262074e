"""Admission to a model's daemon: ``parallel`` generations at a time, FIFO, bounded.

Each model has one ``RequestQueue``. A request takes a ``Ticket`` before anything
is sent to the client: past the bound it is refused at once (503 with
Retry-After, before any SSE header); otherwise it waits its turn in arrival order.
The turn covers the whole request (tokenize, generate, detokenize). With
``parallel`` 1 (the default) the daemon never interleaves two requests; with N, up to N
turns run at once, each generating on a slot of its own (``orchestrator.slots``), and
the rest wait. A ticket's turn can end in another task than the
one that waited for it (the SSE body runs in its own task), which is why this is a
semaphore and not a lock: trio's ``Semaphore`` wakes waiters in FIFO order and has
no owner. A turn begins with the queue's ``on_turn`` (models on demand wake the
model there), and "idle" (``busy``, ``idle_since``) is what they park by.

Waiting for a turn is cancelled when the client goes away: that is the HTTP side's
(``watch_disconnect`` in orchestrator/api/_http.py), which this module knows nothing of.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio

from orchestrator.errors import QueueFullError

__all__ = ["RequestQueue", "Ticket"]


class Ticket:
    """One request's place in a model's queue. ``release`` is idempotent."""

    def __init__(self, queue: RequestQueue) -> None:
        self._queue = queue
        self._state = "waiting"  # -> "running" -> "done"; or "waiting" -> "done"

    async def wait_turn(self) -> None:
        try:
            await self._queue._turns.acquire()
        except BaseException:
            self._leave()
            raise
        self._queue.waiting -= 1
        self._queue.running += 1
        self._state = "running"
        if self._queue.on_turn is not None:
            # The turn's owner releases the ticket if this raises (as for any error in
            # its turn).
            await self._queue.on_turn()

    def _leave(self) -> None:
        if self._state == "waiting":
            self._queue.waiting -= 1
            self._state = "done"
            self._queue.note_idle()

    def release(self) -> None:
        if self._state == "running":
            self._queue.running -= 1
            self._queue._turns.release()
            self._queue.note_idle()
        self._leave()
        self._state = "done"


class RequestQueue:
    def __init__(self, limit: int,
                 on_turn: Callable[[], Awaitable[None]] | None = None, *,
                 parallel: int = 1) -> None:
        if limit < 0:
            raise ValueError("queue limit must be >= 0")
        if parallel < 1:
            raise ValueError("parallel must be >= 1")
        self.limit = limit
        self.parallel = parallel
        """Turns that run at once."""
        self.waiting = 0
        self.running = 0
        self.refused = 0
        # Awaited at the start of every turn: models on demand wake the model there
        # (ServedModel.wake), so a turn never finds it parked or unloaded.
        self.on_turn = on_turn
        self.idle_since = time.monotonic()
        """When the last request left (models on demand park a model idle long enough)."""
        self._turns = trio.Semaphore(parallel)

    @property
    def busy(self) -> bool:
        """A request runs or waits."""
        return self.running > 0 or self.waiting > 0

    def note_idle(self) -> None:
        if not self.busy:
            self.idle_since = time.monotonic()

    def admit(self, model: str) -> Ticket:
        """A ticket for the next turn, or ``QueueFullError`` when the queue is full."""
        # ``waiting`` counts admitted tickets that have not taken their turn yet, also
        # those about to take a free one: ``parallel`` turns plus ``limit`` places.
        if self.running + self.waiting >= self.parallel + self.limit:
            self.refused += 1
            raise QueueFullError(
                f"model {model!r} is busy: {self.waiting} requests are already waiting "
                f"(limit {self.limit}); retry shortly"
            )
        self.waiting += 1
        return Ticket(self)
