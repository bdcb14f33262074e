"""What the dialects share beyond HTTP: error shapes, ids, the templated generation.

Every dialect writes the same ``RequestError`` (orchestrator/errors.py) its own
way: OpenAI as ``{"error": {message, type, param, code}}``, Anthropic as
``{"type": "error", "error": {type, message}}``. A dialect declares an
``ErrorShape`` once and registers its routes as ``DialectRoute(..., errors=SHAPE)``;
the app's one exception handler then answers every error raised while serving such
a route in that shape (``errors_for``), and the dialect's own stream code uses the
same shape for failures after the SSE headers went out. Routes that declare nothing
(``/v1/models``, ``/health``) answer in the OpenAI shape. Middleware that answers
before routing (a 401) finds the shape the same way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import Match, Route
from starlette.types import Scope

from daemons.errors import DaemonsError
from orchestrator.api._fields import Basics
from orchestrator.api._http import error_response
from orchestrator.errors import RequestError
from orchestrator.events import Conversation, GenerationRequest
from orchestrator.generation import chat_prompt
from orchestrator.models import ServedModel
from orchestrator.reasoning import ReasoningControl, ReasoningFormat, ReasoningPlan
from orchestrator.tools import OutputPlan

__all__ = ["OPENAI_ERRORS", "DialectRoute", "ErrorShape", "as_request_error", "chat_generation",
           "errors_for", "new_id"]

log = logging.getLogger("lucerna.http")


@dataclass(frozen=True)
class ErrorShape:
    """How one dialect writes a ``RequestError``: the JSON body, for responses and streams."""

    body: Callable[[RequestError], dict[str, Any]]

    def response(self, error: RequestError) -> JSONResponse:
        return error_response(error, self.body(error))


OPENAI_ERRORS = ErrorShape(RequestError.openai_body)


class DialectRoute(Route):
    """A route whose errors take its dialect's shape."""

    def __init__(self, path: str, endpoint: Callable[..., Any], *, errors: ErrorShape,
                 methods: list[str] | None = None) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.errors = errors


def errors_for(scope: Scope) -> ErrorShape:
    """The error shape of the route serving ``scope``.

    Inside a route starlette's router has put it in ``scope["route"]``; middleware
    that runs before routing (authentication) gets the route that will match.
    """
    route = scope.get("route")
    if route is None:
        router = getattr(scope.get("app"), "router", None)
        route = next((r for r in getattr(router, "routes", ())
                      if r.matches(scope)[0] is not Match.NONE), None)
    return route.errors if isinstance(route, DialectRoute) else OPENAI_ERRORS


def as_request_error(exc: RequestError | DaemonsError) -> RequestError:
    """A daemon failure the core did not map is the server's fault: a 500 in any dialect."""
    if isinstance(exc, RequestError):
        return exc
    log.error("request failed in a daemon: %s", exc)
    return RequestError(f"the model's daemon failed: {exc}")


def new_id(prefix: str) -> str:
    """An opaque id in the style of the APIs we mimic (``chatcmpl-…``, ``call_…``, ``msg_…``)."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


async def chat_generation(model: ServedModel, messages: Sequence[Mapping[str, Any]],
                          output: OutputPlan, basics: Basics,
                          reasoning: ReasoningControl | None = None) -> GenerationRequest:
    """The generation a conversation asks for: templated prompt, tools and constraints,
    and for a thinking model its reasoning block (orchestrator/reasoning.py): off through
    the template's switch where it has one, else by a budget of 0."""
    _, _, template = await model.ready_parts()
    form = None if template.is_fallback else ReasoningFormat.of(template.source)
    control = (reasoning or ReasoningControl()).over(model.reasoning)
    # A constrained output (a forced tool call, a JSON format) is the answer from its
    # first token: the grammar leaves no room for a reasoning block.
    off = control.enabled is False or output.json_schema is not None
    variables = {form.switch: False} if form is not None and off and form.switch else None
    prompt = await chat_prompt(model, messages, output.template_tools, variables)
    plan = None if form is None else ReasoningPlan(
        form, form.starts_inside(prompt.text), 0 if off else control.budget)
    tools = None if output.template_tools is None else tuple(output.template_tools)
    return GenerationRequest(prompt.ids, basics.max_tokens, basics.sampling, basics.stop,
                             marks=prompt.marks, reasoning=plan, lookup=basics.lookup,
                             json_schema=output.json_schema,
                             parser_factory=output.parser_factory,
                             # What PFlash compresses and proxy mode forwards.
                             conversation=Conversation(tuple(messages), tools))
