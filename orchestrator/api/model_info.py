"""What the server says about its models: ``GET /v1/models`` and ``GET /props``.

``/v1/models`` answers three clients with one body. Its ``data`` list holds OpenAI
``Model`` objects (``id``, ``object``, ``created``, ``owned_by``) that also carry
Anthropic's ``ModelInfo`` fields (``type``, ``display_name``, ``created_at``,
``max_input_tokens``, ``max_tokens``), and the body's ``models`` list is Codex's
catalog (``ModelsResponse``), which Codex fetches as
``GET /v1/models?client_version=...`` when its provider has an ``auth`` command
(``lucerna clients`` prints such a config). Each SDK reads its own keys and ignores
the others'.

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
build, capabilities.
"""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.api._fields import DEFAULT_SAMPLING
from orchestrator.errors import ModelNotFoundError
from orchestrator.metrics import lucerna_version
from orchestrator.models import OUTPUT_CAP_CONTEXT_SHARE, ModelRegistry, ServedModel

__all__ = ["CODEX_BASE_INSTRUCTIONS", "ENDPOINTS", "codex_model", "model_list", "props"]

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
             "/v1/messages/count_tokens", "/v1/models", "/props", "/health", "/metrics",
             "/status")

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


def model_list(registry: ModelRegistry) -> dict[str, Any]:
    """The ``/v1/models`` body: OpenAI's list, Anthropic's fields, Codex's catalog."""
    data = [
        {
            "id": model.name,
            "object": "model",
            "created": model.created,
            "owned_by": "lucerna",
            "type": "model",
            "display_name": model.name,
            "created_at": _created_at(model),
            "max_input_tokens": model.n_ctx,
            "max_tokens": model.output_cap,
            "meta": {"architecture": model.info.architecture, "n_ctx": model.n_ctx,
                     "size_bytes": model.info.size_bytes},
        }
        for model in registry
    ]
    return {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "models": [codex_model(model, i) for i, model in enumerate(registry)],
    }


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
        "n_ctx_train": ready.n_ctx_train if ready is not None else model.info.context_length,
        "max_output_tokens": model.output_cap,
        "max_output_tokens_source": ("configured" if model.max_output_tokens is not None
                                     else f"n_ctx / {OUTPUT_CAP_CONTEXT_SHARE}"),
        "default_generation_settings": {
            "n_ctx": model.n_ctx,
            "params": {**DEFAULT_SAMPLING, "n_predict": model.output_cap},
        },
        "total_slots": 1,
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
        "build_info": build,
        "engine": engine,
        "role": model.launch.role.name,
        "models": [m.name for m in registry],
    }


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
