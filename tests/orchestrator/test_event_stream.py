"""``EventStreamResponse`` (orchestrator/api/_http.py): when its headers go out.

The response is driven as an ASGI app under Trio with a recording ``send``. Its events
come from a small async generator standing in for a generation: what is tested is the
order of the response's own sends against the moment the generation reaches its daemon,
which a real daemon makes a matter of microseconds (the server-level behaviour is in
test_http_chat.py and test_scheduling.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, MutableMapping
from typing import Any

import trio

from orchestrator.api._http import HEADERS_WAIT_S, EventStreamResponse
from orchestrator.keepalive import KeepAlive, KeepAliveEvents

SCOPE = {"type": "http", "asgi": {"spec_version": "2.4"}, "method": "POST", "path": "/",
         "headers": []}


async def never_disconnects() -> MutableMapping[str, Any]:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def serve(started: trio.Event | None, start_after_s: float | None) -> list[str]:
    """What happened, in order: the generation starting and the response's sends."""
    happened: list[str] = []
    signal = started if started is not None else trio.Event()

    async def generation() -> AsyncGenerator[bytes, None]:
        if start_after_s is not None:
            await trio.sleep(start_after_s)
            happened.append("generation started")
            signal.set()
        yield b"data: 1\n\n"

    pump = KeepAliveEvents(generation(), None)

    async def body() -> AsyncIterator[bytes]:
        async for event in pump.events():
            assert not isinstance(event, KeepAlive)
            yield event

    async def send(message: MutableMapping[str, Any]) -> None:
        happened.append(str(message["type"]))

    response = EventStreamResponse(body(), pump=pump, headers_after=started)
    await response(SCOPE, never_disconnects, send)
    return happened


async def test_headers_follow_the_generation_start() -> None:
    happened = await serve(trio.Event(), start_after_s=0.0)
    assert happened[:2] == ["generation started", "http.response.start"]


async def test_without_the_signal_headers_go_first() -> None:
    # The ordering above is the signal's doing: without it the response sends its
    # headers before the generation task has run at all.
    happened = await serve(None, start_after_s=0.0)
    assert happened[:2] == ["http.response.start", "generation started"]


async def test_headers_do_not_wait_long_for_a_slow_start() -> None:
    # A generation waiting for a restarting daemon (seconds) must not hold back the
    # headers, after which keep-alives can flow.
    started_at = trio.current_time()
    happened = await serve(trio.Event(), start_after_s=HEADERS_WAIT_S * 5)
    assert happened[:2] == ["http.response.start", "generation started"]
    assert trio.current_time() - started_at >= HEADERS_WAIT_S * 5
