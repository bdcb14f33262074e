"""The Starlette application: routes, error mapping, health."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemons.errors import DaemonsError
from orchestrator.api import (
    anthropic_messages,
    embeddings,
    model_info,
    openai_chat,
    openai_completions,
    openai_responses,
    tokenization,
)
from orchestrator.api._dialect import (
    OPENAI_ERRORS,
    DialectRoute,
    ErrorShape,
    as_request_error,
    errors_for,
)
from orchestrator.api.metrics import Metrics, MetricsMiddleware
from orchestrator.api.security import APIKeyMiddleware
from orchestrator.config import ServerSettings
from orchestrator.errors import BadRequestError, RequestError
from orchestrator.models import ModelRegistry
from orchestrator.supervisor import DaemonState, Supervisor

__all__ = ["build_app"]

log = logging.getLogger("lucerna.http")


def daemon_summary(supervisor: Supervisor) -> dict[str, object]:
    return {
        "state": supervisor.state.value,
        "host": supervisor.launch.host,
        "pid": supervisor.pid,
        "detail": supervisor.detail,
        "restarts": supervisor.restarts,
        "crashes": supervisor.crashes,
        "failed_loads": supervisor.failed_loads,
        "last_exit": supervisor.last_exit,
    }


def build_app(registry: ModelRegistry, settings: ServerSettings | None = None) -> Starlette:
    """The app for ``registry``; ``settings`` supplies keys, CORS and the body limit."""
    settings = settings or ServerSettings()
    metrics = Metrics(registry)

    def dialect(path: str, endpoint: Callable[[Request, ModelRegistry], Awaitable[Response]],
                errors: ErrorShape = OPENAI_ERRORS) -> DialectRoute:
        async def serve(request: Request) -> Response:
            return await endpoint(request, registry)

        return DialectRoute(path, serve, errors=errors, methods=["POST"])

    async def models(request: Request) -> Response:
        return await model_info.models_endpoint(request, registry)

    async def model(request: Request) -> Response:
        return await model_info.model_endpoint(request, registry)

    async def props(request: Request) -> Response:
        return await model_info.props_endpoint(request, registry, settings.keepalive_interval)

    async def health(request: Request) -> Response:
        states = {model.name: daemon_summary(model.supervisor) for model in registry}
        # A model loaded on demand, or stopped while idle, is as it should be.
        all_states = {model.supervisor.state for model in registry} - {DaemonState.UNLOADED}
        if all_states <= {DaemonState.READY}:
            status, code = "ok", 200
        elif all_states <= {DaemonState.STARTING, DaemonState.READY}:
            status, code = "loading", 503
        else:
            status, code = "unavailable", 503
        return JSONResponse({"status": status, "models": states}, status_code=code)

    async def model_load(request: Request) -> Response:
        """Wake a model (start or unpark it) for scripts; answers once it is ready."""
        model = registry.get(request.path_params["model_id"])
        await registry.residency.wake(model)
        return JSONResponse({"model": model.name,
                             **registry.residency.status(model)})

    async def model_unload(request: Request) -> Response:
        """Park (``?action=park``) or stop (the default) an idle model; 409 while busy."""
        model = registry.get(request.path_params["model_id"])
        action = request.query_params.get("action", "stop")
        if action not in ("park", "stop"):
            raise BadRequestError(f"action {action!r} is neither park nor stop",
                                  param="action")
        changed = await registry.residency.unload(model, action)
        return JSONResponse({"model": model.name, "changed": changed,
                             **registry.residency.status(model)})

    async def on_error(request: Request, exc: Exception) -> Response:
        # Each dialect's routes declare its error shape (api/_dialect.py).
        assert isinstance(exc, RequestError | DaemonsError)
        return errors_for(request.scope).response(as_request_error(exc))

    anthropic = anthropic_messages.ANTHROPIC_ERRORS

    app = Starlette(
        routes=[
            dialect("/v1/chat/completions", openai_chat.chat_completions),
            dialect("/v1/completions", openai_completions.completions),
            dialect("/v1/responses", openai_responses.responses),
            dialect("/v1/messages", anthropic_messages.messages, anthropic),
            dialect("/v1/messages/count_tokens", anthropic_messages.count_tokens, anthropic),
            Route("/v1/models", models, methods=["GET"]),
            # ``path``: a model id may hold slashes (``org/name``).
            Route("/v1/models/{model_id:path}", model, methods=["GET"]),
            dialect("/tokenize", tokenization.tokenize),
            dialect("/detokenize", tokenization.detokenize),
            dialect("/v1/embeddings", embeddings.embeddings),
            Route("/props", props, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/models/{model_id:path}/load", model_load, methods=["POST"]),
            Route("/models/{model_id:path}/unload", model_unload, methods=["POST"]),
            *metrics.routes(),
        ],
        middleware=_middleware(settings, metrics),
        exception_handlers={RequestError: on_error, DaemonsError: on_error},
    )
    app.state.max_body_bytes = settings.max_body_bytes
    app.state.keepalive_interval_s = settings.keepalive_interval
    app.state.metrics = metrics
    return app


def _middleware(settings: ServerSettings, metrics: Metrics) -> list[Middleware]:
    """Outermost first: metrics see every response, 401s included; CORS answers
    preflights (which carry no key) before the key check, and adds its headers to a
    401 so a browser client can read why."""
    stack = [Middleware(MetricsMiddleware, metrics=metrics)]
    if settings.cors_origins:
        stack.append(Middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                                allow_methods=["GET", "POST"], allow_headers=["*"],
                                max_age=600))
    if settings.api_keys:
        stack.append(Middleware(APIKeyMiddleware, keys=settings.api_keys))
    return stack
