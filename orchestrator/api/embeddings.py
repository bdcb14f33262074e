"""OpenAI ``POST /v1/embeddings`` on the daemon's ``embed`` (PROTOCOL.md 5.11).

``input`` is a string, a list of strings, a list of token ids, or a list of such
lists (at most ``MAX_INPUTS``); ``encoding_format`` ``float`` (default) or ``base64``
(little-endian float32, what the ``openai`` client asks for and decodes with numpy);
``dimensions`` keeps the first N values. Every vector is L2-normalized (after the
cut, as OpenAI's shortened embeddings are), so a text's cosine similarity with itself
is 1 and a dot product is the cosine.

Which models: those configured for it (``embeddings = "mean" | "last"`` in a model's
table, ``lucerna serve --embeddings``): each input's final hidden states, pooled that
way, from the served model itself. No small embedding GGUF ships as a package the
default install can pull, so this is the served model's own states, not a model
trained for retrieval; ``dimensions`` cuts them all the same, though such a model was
not trained to keep meaning in a prefix. Another model is a 400.

All inputs of a request go to the daemon in one command, in the model's queue like a
generation. The daemon clears its live sequence to embed; the prefix cache first keeps
the conversation it held in a slot (``PrefixCache.before_live_cleared``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemons.errors import DaemonDiedError, DaemonReplyError
from orchestrator.api import _fields as fields
from orchestrator.api._http import read_json_body, watch_disconnect
from orchestrator.errors import BadRequestError, ContextLengthError, ServiceUnavailableError
from orchestrator.generation import MAX_RECOVERIES, tokenize_text
from orchestrator.models import ModelRegistry, ServedModel

__all__ = ["MAX_INPUTS", "embeddings", "parse_inputs"]

MAX_INPUTS = 2048
"""OpenAI's bound on the inputs of one request."""


def parse_inputs(body: Mapping[str, Any]) -> list[str | list[int]]:
    """``input`` as a list of texts and token-id lists; 400 for anything else."""
    value = body.get("input")

    def is_ids(item: object) -> bool:
        return isinstance(item, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in item)

    if isinstance(value, str):
        inputs: list[str | list[int]] = [value]
    elif is_ids(value) and value and not isinstance(value[0], list):
        inputs = [list(value)]
    elif isinstance(value, list) and value and all(
            isinstance(item, str) or is_ids(item) for item in value):
        inputs = list(value)
    else:
        raise BadRequestError("input must be a string, an array of strings, an array of "
                              "token ids, or an array of token-id arrays", param="input")
    if len(inputs) > MAX_INPUTS:
        raise BadRequestError(f"input has {len(inputs)} items; at most {MAX_INPUTS} are "
                              "embedded in one request", param="input")
    if any(len(item) == 0 for item in inputs):
        raise BadRequestError("input must not hold an empty string or token array",
                              param="input")
    return inputs


def _encoding(body: Mapping[str, Any]) -> Literal["float", "base64"]:
    value = body.get("encoding_format", "float")
    if value == "float" or value is None:
        return "float"
    if value == "base64":
        return "base64"
    raise BadRequestError(f"encoding_format must be 'float' or 'base64', got {value!r}",
                          param="encoding_format")


async def _ids(model: ServedModel, item: str | list[int]) -> list[int]:
    if isinstance(item, str):
        return await tokenize_text(model, item)
    _, pieces, _ = await model.ready_parts()
    bad = next((t for t in item if not 0 <= t < pieces.n_vocab), None)
    if bad is not None:
        raise BadRequestError(f"input token id {bad} is outside the vocabulary "
                              f"(0..{pieces.n_vocab - 1})", param="input")
    return item


async def _embed(model: ServedModel, inputs: list[list[int]], pooling: str) -> np.ndarray:
    died: DaemonDiedError | None = None
    for _ in range(MAX_RECOVERIES + 1):
        client = await model.supervisor.wait_ready()
        try:
            if model.prefix_cache is not None:
                await model.prefix_cache.before_live_cleared(client)
            rows = await client.embed(inputs, pooling="last" if pooling == "last" else "mean")
            if model.prefix_cache is not None:
                await model.prefix_cache.settle(client)
            return rows
        except DaemonDiedError as exc:
            died = exc
        except DaemonReplyError as exc:
            if exc.code == "context_overflow":
                raise ContextLengthError(exc.detail, param="input") from exc
            raise
    raise ServiceUnavailableError(f"model {model.name!r} is not available: {died}") from died


async def embeddings(request: Request, registry: ModelRegistry) -> Response:
    body = await read_json_body(request)
    model = registry.get(fields.model_name(body))
    if model.embeddings is None:
        raise BadRequestError(f"model {model.name!r} is not configured for embeddings; "
                              "serve it with --embeddings (or embeddings = \"mean\" in its "
                              "[[models]] table)", param="model")
    inputs = parse_inputs(body)
    encoding = _encoding(body)
    dimensions = fields.integer(body, "dimensions", 1)
    ticket = model.queue.admit(model.name)
    try:
        async with watch_disconnect(request.receive):
            await ticket.wait_turn()
            ids = [await _ids(model, item) for item in inputs]
            longest = max(len(one) for one in ids)
            if longest > model.n_ctx:
                raise ContextLengthError(
                    f"This model's maximum context length is {model.n_ctx} tokens; an input "
                    f"has {longest}.", param="input")
            rows = await _embed(model, ids, model.embeddings)
    finally:
        ticket.release()
    if dimensions is not None:
        if dimensions > rows.shape[1]:
            raise BadRequestError(f"dimensions={dimensions} is more than the {rows.shape[1]} "
                                  f"values of {model.name!r}'s embeddings", param="dimensions")
        rows = rows[:, :dimensions]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = (rows / np.where(norms > 0, norms, 1)).astype("<f4")
    data = [{"object": "embedding", "index": index,
             "embedding": (base64.b64encode(row.tobytes()).decode("ascii")
                           if encoding == "base64" else row.tolist())}
            for index, row in enumerate(rows)]
    n_tokens = sum(len(one) for one in ids)
    return JSONResponse({"object": "list", "data": data, "model": model.name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})
