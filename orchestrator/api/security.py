"""API-key authentication as a pure ASGI middleware.

Default-deny: every HTTP (and websocket) request needs a valid key unless its routed
path is *exactly* one of the public paths (``/health``). The path checked is the one
Starlette's router dispatches on (``scope["path"]`` less ``root_path``), so no
spelling gets past the check into a route: ``//v1/models``, ``/health/``,
``/HEALTH`` and ``/health/../v1/models`` are all different from ``/health`` and
need the key (vLLM's CVE-2026-48746 was a prefix check that ``//v1`` slipped past).

A key comes as ``Authorization: Bearer <key>`` (OpenAI clients, Claude Code's
``ANTHROPIC_AUTH_TOKEN``) or ``x-api-key: <key>`` (Anthropic clients). Each
configured key is compared with ``hmac.compare_digest``, and all of them are
compared every time, so timing tells nothing about a key (vLLM's CVE-2025-59425).

This is pure ASGI on purpose: Starlette's ``BaseHTTPMiddleware`` breaks streaming
responses and disconnect detection.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Collection, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PUBLIC_PATHS", "APIKeyMiddleware", "route_path"]

PUBLIC_PATHS = frozenset({"/health"})


def route_path(scope: Scope) -> str:
    """The path the router matches: ``scope["path"]`` without ``root_path``.

    The same computation as Starlette's (private) ``get_route_path``.
    """
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root) and (path == root or path[len(root)] == "/"):
        return path[len(root):]
    return path


def _is_anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: Sequence[str],
                 public_paths: Collection[str] = PUBLIC_PATHS) -> None:
        if not keys or not all(keys):
            raise ValueError("APIKeyMiddleware needs at least one non-empty key")
        self.app = app
        self._keys = [key.encode() for key in keys]
        self._public = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if path in self._public or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self._refuse(path, send)

    def _authorized(self, scope: Scope) -> bool:
        offered: list[bytes] = []
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    offered.append(token.strip())
            elif name == b"x-api-key":
                offered.append(value.strip())
        matched = False
        for token in offered:
            for key in self._keys:
                # No short-circuit: every offered token meets every key.
                matched |= hmac.compare_digest(token, key)
        return matched

    async def _refuse(self, path: str, send: Send) -> None:
        message = ("Missing or invalid API key: send it as 'Authorization: Bearer <key>' "
                   "or 'x-api-key: <key>'.")
        body: dict[str, object]
        if _is_anthropic(path):
            body = {"type": "error",
                    "error": {"type": "authentication_error", "message": message}}
        else:
            body = {"error": {"message": message, "type": "authentication_error",
                              "param": None, "code": "invalid_api_key"}}
        payload = json.dumps(body).encode()
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"www-authenticate", b'Bearer realm="lucerna"'),
            ],
        })
        await send({"type": "http.response.body", "body": payload})
