"""A generation served over HTTP: the model's queue, the client's disconnect, and
the response, streaming (SSE with keep-alives) or not.

The core (orchestrator/generation.py) takes plain values and yields events; this is
where a starlette ``Request`` becomes those values and the events become a
``Response``. Every dialect serves its generations through ``run_generation``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import trio
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.api._http import EventStreamResponse, watch_disconnect
from orchestrator.events import Event, GenerationRequest
from orchestrator.generation import generate_events, prepare_generation
from orchestrator.keepalive import DEFAULT_KEEPALIVE_INTERVAL_S, KeepAlive, KeepAliveEvents
from orchestrator.models import ServedModel

__all__ = ["run_generation"]


async def run_generation(
    request: Request,
    model: ServedModel,
    build: Callable[[], Awaitable[GenerationRequest]],
    *,
    stream: bool,
    to_sse: Callable[[GenerationRequest, AsyncIterator[Event | KeepAlive]],
                     AsyncIterator[bytes]],
    to_response: Callable[[GenerationRequest, list[Event]], Response],
) -> Response:
    """Serve one generation in the model's queue, streaming or not.

    ``build`` runs once this request's turn has come (it may tokenize on the
    daemon); errors it raises reach the client as plain HTTP errors, before any
    SSE header. ``to_sse`` must consume its events inside ``aclosing``; between
    them it gets a ``KeepAlive`` whenever the server's keep-alive interval passed
    without one (orchestrator/keepalive.py).
    """
    ticket = model.queue.admit(model.name)
    handed_over = False
    try:
        async with watch_disconnect(request.receive):
            await ticket.wait_turn()
            generation = await prepare_generation(model, await build(), request.headers)
            if not stream:
                async with aclosing(generate_events(model, generation)) as events:
                    collected = [event async for event in events]
                return to_response(generation, collected)
        handed_over = True
        app_state = getattr(request.scope.get("app"), "state", None)
        interval = getattr(app_state, "keepalive_interval_s", DEFAULT_KEEPALIVE_INTERVAL_S)
        started = trio.Event()
        pump = KeepAliveEvents(generate_events(model, generation, started.set), interval)
        return EventStreamResponse(to_sse(generation, pump.events()), on_close=ticket.release,
                                   pump=pump, headers_after=started)
    finally:
        if not handed_over:
            ticket.release()
