"""The Starlette application: routes, error mapping, health."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemons.errors import DaemonsError
from orchestrator.api._http import error_response
from orchestrator.api.openai_chat import chat_completions
from orchestrator.errors import RequestError
from orchestrator.models import ModelRegistry
from orchestrator.supervisor import DaemonState, Supervisor

__all__ = ["build_app"]

log = logging.getLogger("lucerna.http")


def daemon_summary(supervisor: Supervisor) -> dict[str, object]:
    return {
        "state": supervisor.state.value,
        "pid": supervisor.pid,
        "detail": supervisor.detail,
        "restarts": supervisor.restarts,
        "crashes": supervisor.crashes,
        "failed_loads": supervisor.failed_loads,
        "last_exit": supervisor.last_exit,
    }


def build_app(registry: ModelRegistry) -> Starlette:
    async def chat(request: Request) -> Response:
        return await chat_completions(request, registry)

    async def models(request: Request) -> Response:
        return JSONResponse({
            "object": "list",
            "data": [
                {
                    "id": model.name,
                    "object": "model",
                    "created": model.created,
                    "owned_by": "lucerna",
                    "meta": {"architecture": model.info.architecture, "n_ctx": model.n_ctx,
                             "size_bytes": model.info.size_bytes},
                }
                for model in registry
            ],
        })

    async def health(request: Request) -> Response:
        states = {model.name: daemon_summary(model.supervisor) for model in registry}
        all_states = {model.supervisor.state for model in registry}
        if all_states == {DaemonState.READY}:
            status, code = "ok", 200
        elif all_states <= {DaemonState.STARTING, DaemonState.READY}:
            status, code = "loading", 503
        else:
            status, code = "unavailable", 503
        return JSONResponse({"status": status, "models": states}, status_code=code)

    async def on_request_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        return error_response(exc)

    async def on_daemon_error(request: Request, exc: Exception) -> Response:
        log.error("request %s %s failed in a daemon: %s", request.method, request.url.path, exc)
        error = RequestError(f"the model's daemon failed: {exc}")
        return error_response(error)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={RequestError: on_request_error, DaemonsError: on_daemon_error},
    )
