"""Keep-alives for streams whose events can be minutes apart.

A long prompt is prefilled before the first token, and on a CPU that takes minutes.
Clients time out streams that stay silent: Codex after ``stream_idle_timeout_ms``
(300 s) without an *event* (an SSE comment does not count), proxies after 60 s
without bytes. ``KeepAliveEvents`` hands a generation's events on and, whenever
``interval_s`` passes without one, a ``KeepAlive`` instead; each dialect writes that
as what its clients count as traffic:

- Anthropic Messages: ``event: ping`` (the API's own keep-alive event);
- OpenAI Responses: a repeated ``response.in_progress`` (a real event with the next
  ``sequence_number``, which resets Codex's idle timer);
- Chat Completions and Completions: an SSE comment, ``: keepalive`` (their clients
  skip comments, while an extra chunk would reach the user as an empty delta).

Ticks come only where events are late: while the daemon prefills, or between tokens
slower than the interval. The generation runs in a task of the response's own
nursery (``EventStreamResponse(..., pump=...)``), not inside the dialect's
generator: waiting with a timeout must never cancel the daemon's stream itself.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

__all__ = ["DEFAULT_KEEPALIVE_INTERVAL_S", "KeepAlive", "KeepAliveEvents"]

DEFAULT_KEEPALIVE_INTERVAL_S = 15.0

T = TypeVar("T")


@dataclass(frozen=True)
class KeepAlive:
    """No event for the keep-alive interval: say so on the wire, in the dialect's way."""


@dataclass(frozen=True)
class _Raised:
    error: Exception


class KeepAliveEvents(Generic[T]):
    """``events`` with a ``KeepAlive`` wherever ``interval_s`` passes without one.

    ``run`` must be running (``EventStreamResponse`` starts it) while ``events()`` is
    consumed. An exception from the generation is raised by ``events()``, where the
    dialect's own error handling expects it. ``interval_s`` of 0 or None: no ticks.
    """

    def __init__(self, events: AsyncGenerator[T, None], interval_s: float | None) -> None:
        self._events = events
        self._interval = interval_s if interval_s and interval_s > 0 else math.inf
        # Unbuffered: an event is handed over only when the consumer takes it, so a
        # tick can never overtake an event the generation has already produced.
        self._send, self._receive = trio.open_memory_channel[T | _Raised](0)

    async def run(self) -> None:
        """Pull the generation; closing it (cancelled, or done) stops the daemon's work."""
        async with self._send, aclosing(self._events):
            try:
                async for event in self._events:
                    await self._send.send(event)
            except Exception as exc:  # handed to the consumer, whose dialect reports it
                await self._send.send(_Raised(exc))

    async def events(self) -> AsyncGenerator[T | KeepAlive, None]:
        """The events, ticks between them; consume once, while ``run`` runs."""
        async with self._receive:
            while True:
                item: T | _Raised | None = None
                with trio.move_on_after(self._interval):
                    try:
                        item = await self._receive.receive()
                    except trio.EndOfChannel:
                        return
                if item is None:
                    yield KeepAlive()
                elif isinstance(item, _Raised):
                    raise item.error
                else:
                    yield item
