"""What every dialect needs from HTTP: bounded JSON bodies, error responses, SSE, and
watching for the client to leave."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from orchestrator.errors import BadRequestError, ClientGoneError, RequestError
from orchestrator.keepalive import KeepAliveEvents

__all__ = [
    "MAX_BODY_BYTES",
    "EventStreamResponse",
    "error_response",
    "read_json_body",
    "sse",
    "watch_disconnect",
]

# Starlette's Request.json() reads bodies of any size; a 128K-token prompt is well
# under 2 MB of JSON, so 32 MB leaves room for long conversations and still refuses abuse.
MAX_BODY_BYTES = 32 * 1024 * 1024


class PayloadTooLargeError(RequestError):
    status = 413
    error_type = "invalid_request_error"
    code = "payload_too_large"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json_body(request: Request) -> dict[str, Any]:
    # The app may lower or raise the limit ([server] max_body_bytes).
    limit = getattr(getattr(request.scope.get("app"), "state", None), "max_body_bytes",
                    MAX_BODY_BYTES)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError(f"request body exceeds {limit} bytes")
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequestError("request body must be a JSON object")
    return data


def error_response(error: RequestError, body: dict[str, Any] | None = None) -> JSONResponse:
    """``error`` as an HTTP response; ``body`` is its dialect's shape (default: OpenAI's)."""
    retry_after = getattr(error, "retry_after_s", 1)
    headers = {"Retry-After": str(retry_after)} if error.status == 503 else None
    return JSONResponse(error.openai_body() if body is None else body, status_code=error.status,
                        headers=headers)


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One SSE event; ``event`` names it (Anthropic clients dispatch on that line)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False,
                                                            allow_nan=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


HEADERS_WAIT_S = 0.1


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that always closes its event generator.

    Starlette cancels the body iterator when the client disconnects but never
    closes it; our generators hold a daemon's generation open, so they must be
    closed deterministically (which makes the daemon cancel at once), not whenever
    the garbage collector gets to them.
    """

    def __init__(self, events: AsyncIterator[bytes],
                 on_close: Callable[[], None] | None = None,
                 pump: KeepAliveEvents[Any] | None = None,
                 headers_after: trio.Event | None = None) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._on_close = on_close
        self._pump = pump  # the generation ``events`` reads, run beside it (keepalive.py)
        # Set once the pump's generation has reached the daemon: the headers' send then
        # overlaps the prefill instead of delaying the generate command (0.3-0.6 ms of
        # TTFT: git show 7a0c96e:docs/benchmarks.md, "Orchestration overhead"). Waited on
        # at most HEADERS_WAIT_S, so a generation
        # that fails or waits for a restarting daemon still gets its headers and
        # keep-alives promptly.
        self._headers_after = headers_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # on_close runs whether the body ran to the end, the client left, or the body
        # never started at all (a disconnect can win before the first iteration).
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._on_close is not None:
                self._on_close()

    async def stream_response(self, send: Send) -> None:
        async with trio.open_nursery() as nursery:
            if self._pump is not None:
                nursery.start_soon(self._pump.run)
            if self._headers_after is not None:
                with trio.move_on_after(HEADERS_WAIT_S):
                    await self._headers_after.wait()
            iterator = self.body_iterator
            if hasattr(iterator, "aclose"):
                async with aclosing(iterator):  # type: ignore[type-var]
                    await super().stream_response(send)
            else:
                await super().stream_response(send)
            nursery.cancel_scope.cancel()  # a body that stopped early leaves the pump waiting


@asynccontextmanager
async def watch_disconnect(receive: Receive) -> AsyncIterator[None]:
    """Run the block; if the client disconnects meanwhile, cancel it and raise ClientGoneError.

    Only for use after the request body has been read in full: from then on the
    only message ASGI can deliver is ``http.disconnect``. It covers a request's wait
    for its turn in the model's queue and a non-streaming generation; a streaming
    response is watched by the response itself.
    """
    gone = False
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:

        async def listen() -> None:
            nonlocal gone
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone = True
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(listen)
        # The block's own exceptions are re-raised after the nursery, unwrapped; a
        # Cancelled that came from our cancel (the client left) becomes ClientGoneError.
        try:
            yield
        except BaseException as exc:
            failure = exc
        finally:
            nursery.cancel_scope.cancel()
    if gone:
        raise ClientGoneError("the client disconnected")
    if failure is not None:
        raise failure
