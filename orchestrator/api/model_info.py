"""What the server says about its models: ``GET /v1/models``,
``GET /v1/models/{id}`` and ``GET /props``.

``/v1/models`` answers three clients with one body. Its ``data`` list holds OpenAI
``Model`` objects (``id``, ``object``, ``created``, ``owned_by``) that also carry
Anthropic's ``ModelInfo`` fields (``type``, ``display_name``, ``created_at``,
``lifecycle``, ``max_input_tokens``, ``max_tokens``) beside Anthropic's page fields
(``has_more``, ``first_id``, ``last_id``), and the body's ``models`` list is Codex's
catalog (``ModelsResponse``), which Codex fetches as
``GET /v1/models?client_version=...`` when its provider has an ``auth`` command
(``lucerna clients`` prints such a config). Each SDK reads its own keys and ignores
the others'. Anthropic's query (``limit``, ``after_id``, ``before_id``,
``lifecycle[]``) pages and filters ``data``; OpenAI's clients send none of it and
get every model. ``/v1/models/{id}`` is one ``data`` entry, for both SDKs.

Both SDKs share these paths, so the route cannot declare one error shape
(api/_dialect.py): the Anthropic SDK always sends ``anthropic-version`` and the
OpenAI SDK never does, so that header picks the shape of a 404 or 400.

The Codex entry is what makes Codex usable on a local model: its ``context_window``
is the served context (Codex's fallback assumes a frontier model's); its
``base_instructions`` replace Codex's own system prompt, about 17 kB written for
frontier models (about 4k tokens, the whole default context of 4096), with a short
one; no ``apply_patch_tool_type``, so Codex leaves out ``apply_patch`` (which it
sends only as a freeform Lark-grammar ``custom`` tool, which this server cannot
call); ``shell_command`` is the simplest of Codex's shell tools; no reasoning levels,
no search tool, text input only. Fields Codex 0.169 requires are all there
(``codex debug models`` shows what it parsed).

``/props`` is llama-server's ``GET /props``, per model (``?model=NAME``, default the
first): context, the output cap, the sampling defaults, the chat template, engine and
build, capabilities, speculation.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.api._dialect import OPENAI_ERRORS, ErrorShape
from orchestrator.api._fields import DEFAULT_SAMPLING
from orchestrator.api.anthropic_messages import ANTHROPIC_ERRORS
from orchestrator.api.metrics import lucerna_version
from orchestrator.errors import BadRequestError, ModelNotFoundError, RequestError
from orchestrator.models import OUTPUT_CAP_CONTEXT_SHARE, ModelRegistry, ServedModel
from orchestrator.residency import Residency
from protocol import ReadyInfo

__all__ = ["CODEX_BASE_INSTRUCTIONS", "ENDPOINTS", "codex_model", "model_endpoint",
           "model_list", "model_object", "models_endpoint", "props"]

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
             "/v1/messages/count_tokens", "/v1/models", "/v1/models/{id}", "/props",
             "/tokenize", "/detokenize", "/health", "/metrics", "/status")

# Anthropic's ``GET /v1/models`` query: ``limit`` is 1-1000 (its default, 20, applies
# only when the client sends a limit: OpenAI clients cannot page, so they get all).
MAX_PAGE = 1000
LIFECYCLES = ("active", "deprecated", "retired")

CODEX_BASE_INSTRUCTIONS = (
    "You are Codex, a coding agent in the user's terminal, running on a model that "
    "Lucerna serves on the user's own machine. Help with the user's software task: "
    "look at and change files by running shell commands with the tools you have, one "
    "step at a time. Keep answers short and concrete; when the task is done, say what "
    "you did."
)


def _created_at(model: ServedModel) -> str:
    return datetime.datetime.fromtimestamp(model.created, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def codex_model(model: ServedModel, priority: int) -> dict[str, Any]:
    """``model`` as a Codex ``ModelInfo`` (codex-rs/protocol/src/openai_models.rs)."""
    n_ctx = model.n_ctx
    return {
        "slug": model.name,
        "display_name": model.name,
        "description": f"{model.info.architecture}, served by Lucerna ({n_ctx} tokens of "
                       "context)",
        "supported_reasoning_levels": [],
        "default_reasoning_summary": "none",
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        "base_instructions": CODEX_BASE_INSTRUCTIONS,
        "supports_reasoning_summaries": False,  # required by Codex releases before 0.169
        "supports_parallel_tool_calls": False,
        "support_verbosity": False,
        "default_verbosity": None,
        # None: no apply_patch tool. Codex 0.169 sends it only as a freeform (Lark
        # grammar) ``custom`` tool, which this server cannot call.
        "apply_patch_tool_type": None,
        # Tool output kept in the conversation: a slice of the context, not Codex's 10k.
        "truncation_policy": {"mode": "tokens", "limit": max(256, n_ctx // 8)},
        "context_window": n_ctx,
        "max_context_window": n_ctx,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
        "supports_search_tool": False,
        "include_skills_usage_instructions": False,
        "include_plugin_usage_instructions": False,
        "include_apps_usage_instructions": False,
    }


def model_object(model: ServedModel) -> dict[str, Any]:
    """``model`` as an OpenAI ``Model`` that is also an Anthropic ``ModelInfo``."""
    return {
        "id": model.name,
        "object": "model",
        "created": model.created,
        "owned_by": "lucerna",
        "type": "model",
        "display_name": model.name,
        "created_at": _created_at(model),
        "lifecycle": "active",
        "deprecated_at": None,
        "retires_at": None,
        "max_input_tokens": model.n_ctx,
        "max_tokens": model.output_cap,
        "meta": {"architecture": model.info.architecture, "n_ctx": model.n_ctx,
                 "size_bytes": model.info.size_bytes,
                 # models on demand: unloaded, starting, ready, parked, ...
                 "state": Residency.state(model)},
    }


def model_list(registry: ModelRegistry, query: Mapping[str, list[str]] | None = None
               ) -> dict[str, Any]:
    """The ``/v1/models`` body: OpenAI's list, Anthropic's page, Codex's catalog.

    ``query`` is the request's query, each key with all its values; Anthropic's keys
    page and filter ``data`` (``BadRequestError`` for a bad one), Codex's catalog
    always lists every model.
    """
    data, has_more = _page([model_object(model) for model in registry], query or {})
    return {
        "object": "list",
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "models": [codex_model(model, i) for i, model in enumerate(registry)],
    }


def _page(data: list[dict[str, Any]], query: Mapping[str, list[str]]
          ) -> tuple[list[dict[str, Any]], bool]:
    """Anthropic's paging over ``data``: the entries after ``after_id`` (or before
    ``before_id``), at most ``limit`` of them, and whether more lie beyond."""
    def one(key: str) -> str | None:
        values = query.get(key, [])
        if len(values) > 1:
            raise BadRequestError(f"{key}: give it once", param=key)
        return values[0] if values else None

    # The anthropic SDK writes the lifecycle list as ``lifecycle[]=active&...``.
    lifecycles = [*query.get("lifecycle[]", []), *query.get("lifecycle", [])]
    for value in lifecycles:
        if value not in LIFECYCLES:
            raise BadRequestError(f"lifecycle: {value!r} is not one of "
                                  f"{', '.join(LIFECYCLES)}", param="lifecycle")
    if lifecycles and "active" not in lifecycles:
        data = []  # every served model is active
    limit_text, after_id, before_id = one("limit"), one("after_id"), one("before_id")
    limit = len(data)
    if limit_text is not None:
        try:
            limit = int(limit_text)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequestError(f"limit: must be an integer from 1 to {MAX_PAGE}, got "
                                  f"{limit_text!r}", param="limit")
    if after_id is not None and before_id is not None:
        raise BadRequestError("give after_id or before_id, not both", param="before_id")
    ids = [entry["id"] for entry in data]
    for key, cursor in (("after_id", after_id), ("before_id", before_id)):
        if cursor is not None and cursor not in ids:
            raise BadRequestError(f"{key}: no model {cursor!r} is listed", param=key)
    if before_id is not None:
        end = ids.index(before_id)
        return data[max(0, end - limit):end], end > limit
    start = 0 if after_id is None else ids.index(after_id) + 1
    return data[start:start + limit], start + limit < len(data)


def _errors(request: Request) -> ErrorShape:
    return ANTHROPIC_ERRORS if "anthropic-version" in request.headers else OPENAI_ERRORS


async def models_endpoint(request: Request, registry: ModelRegistry) -> Response:
    """``GET /v1/models``."""
    query = {key: request.query_params.getlist(key) for key in request.query_params}
    try:
        return JSONResponse(model_list(registry, query))
    except RequestError as exc:
        return _errors(request).response(exc)


async def model_endpoint(request: Request, registry: ModelRegistry) -> Response:
    """``GET /v1/models/{id}``: one model, in OpenAI's and Anthropic's shape at once."""
    name = request.path_params["model_id"]
    try:
        model = registry.get(name)
    except ModelNotFoundError as exc:
        return _errors(request).response(exc)
    return JSONResponse(model_object(model))


def props(model: ServedModel, registry: ModelRegistry,
          keepalive_interval_s: float) -> dict[str, Any]:
    """llama-server's ``/props`` for ``model``, with Lucerna's own additions."""
    client = model.supervisor.client
    ready = client.ready if client is not None else None
    template = model.template
    engine = None if ready is None else {"name": ready.engine, "version": ready.version,
                                         "backend": ready.backend}
    build = f"lucerna {lucerna_version()}"
    if ready is not None:
        build += f"; engine {ready.engine} {ready.version} ({ready.backend})"
    return {
        "model_alias": model.name,
        "model_path": str(model.launch.model),
        "architecture": model.info.architecture,
        "state": model.supervisor.state.value,
        "n_ctx": model.n_ctx,
        # With several sequences a request may take more than n_ctx from the shared pool.
        "n_ctx_request_max": model.context_limit,
        "n_ctx_train": ready.n_ctx_train if ready is not None else model.info.context_length,
        "max_output_tokens": model.output_cap,
        "max_output_tokens_source": ("configured" if model.max_output_tokens is not None
                                     else f"n_ctx / {OUTPUT_CAP_CONTEXT_SHARE}"),
        "default_generation_settings": {
            "n_ctx": model.n_ctx,
            "params": {**DEFAULT_SAMPLING, "n_predict": model.output_cap},
        },
        # llama-server's slots are our sequences: requests that generate at once.
        "total_slots": model.parallel,
        "parallel": model.parallel,
        # Batch-invariant decoding (--deterministic): what the running daemon reports,
        # else what the model is configured with.
        "deterministic": (ready.deterministic if ready is not None
                          else model.launch.deterministic),
        "parallel_choice": model.parallel_status,
        "chat_template": None if template is None else template.source,
        "chat_template_source": None if template is None else (
            "fallback" if template.is_fallback else "gguf"),
        "bos_token": None if template is None else template.bos_token,
        "eos_token": None if template is None else template.eos_token,
        "modalities": {"vision": False, "audio": False},
        "capabilities": {
            "endpoints": list(ENDPOINTS),
            "streaming": True,
            "tools": True,
            "tool_choice": ["auto", "none", "required", "function"],
            "response_format": ["text", "json_object", "json_schema"],
            "daemon": sorted(ready.capabilities) if ready is not None else [],
        },
        "keepalive_interval_s": keepalive_interval_s,
        # llama-server's --cache-ram, and our tiers (orchestrator/prefix_cache.py).
        "prefix_cache": model.prefix_cache.status() if model.prefix_cache else None,
        "build_info": build,
        "engine": engine,
        "role": model.launch.role.name,
        "speculation": speculation(model, ready),
        "models": [m.name for m in registry],
    }


def speculation(model: ServedModel, ready: ReadyInfo | None) -> dict[str, Any]:
    """What the model speculates with (PROTOCOL.md 5.9): the DFlash draft, prompt lookup
    (``off``; ``opt-in``: requests ask with ``"lookup": true``; ``on``: every request
    unless ``"lookup": false``), the tokens per verify step, and how the draft's
    proposals are verified (``verify``: ``chain``, or ``tree`` with ``tree``'s node
    budget and branches). Figures are the running daemon's, else the configured ones
    (None: the daemon's default). ``usage`` says per request which proposers ran, how
    many proposals were accepted and how many steps were trees."""
    launch = model.launch
    fields = ready.fields if ready is not None else {}
    block = fields.get("draft_block")
    budget = fields.get("draft_tree", launch.draft_tree)
    branches = fields.get("draft_tree_branches", launch.draft_tree_branches)
    return {"draft": None if launch.draft is None else str(launch.draft),
            "lookup": launch.lookup or "off",
            "block": int(block) if block is not None else launch.draft_block_size,
            "verify": "tree" if budget else "chain",
            "tree": ({"budget": int(budget),
                      "branches": None if branches is None else int(branches)}
                     if budget else None)}


async def props_endpoint(request: Request, registry: ModelRegistry,
                         keepalive_interval_s: float) -> Response:
    name = request.query_params.get("model")
    if name is None:
        model = next(iter(registry), None)
        if model is None:
            raise ModelNotFoundError("no model is served", param="model")
    else:
        model = registry.get(name)
    return JSONResponse(props(model, registry, keepalive_interval_s))
