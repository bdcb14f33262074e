"""llama-server's ``POST /tokenize`` and ``POST /detokenize``, on the daemons' tokenizer.

``/tokenize`` takes ``{"content": str, "add_special": bool, "parse_special": bool,
"with_pieces": bool}`` and answers ``{"tokens": [id, ...]}``, or with ``with_pieces``
``{"tokens": [{"id": id, "piece": str | [byte, ...]}, ...]}``: a piece that is not
whole UTF-8 (part of a multi-byte character) is its bytes, as llama-server writes it.
``add_special`` (default false, as llama-server's) adds the model's BOS where the model
asks for one; control-token text such as ``<start_of_turn>`` is always parsed as
that token (llama-server's ``parse_special`` default; ``false`` is refused, the
daemon's tokenizer is not asked for it).

``/detokenize`` takes ``{"tokens": [id, ...]}`` and answers ``{"content": str}`` with
control tokens shown, as llama-server renders them, so a tokenize / detokenize round
trip gives the text back.

``model`` names the model whose tokenizer to use; it may be left out only when one
model is served. Errors are in OpenAI's shape, as llama-server's are.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from daemons.errors import DaemonDiedError
from orchestrator.api._http import read_json_body, watch_disconnect
from orchestrator.errors import BadRequestError, ModelNotFoundError, ServiceUnavailableError
from orchestrator.generation import MAX_RECOVERIES, tokenize_text
from orchestrator.models import ModelRegistry, ServedModel

__all__ = ["detokenize", "tokenize"]


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise BadRequestError(f"{key} must be true or false, got {value!r}", param=key)
    return value


def _model(body: dict[str, Any], registry: ModelRegistry) -> ServedModel:
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise BadRequestError("model must be a string", param="model")
    if name is None and len(registry) > 1:
        # Each model has its own vocabulary: counting with a guessed one is wrong.
        names = ", ".join(m.name for m in registry)
        raise ModelNotFoundError(f"several models are served; name one in 'model': {names}",
                                 param="model")
    return registry.get(name)


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


async def tokenize(request: Request, registry: ModelRegistry) -> Response:
    body = await read_json_body(request)
    content = body.get("content")
    if not isinstance(content, str):
        raise BadRequestError("content must be a string (the text to tokenize)",
                              param="content")
    add_special = _flag(body, "add_special", False)
    with_pieces = _flag(body, "with_pieces", False)
    if not _flag(body, "parse_special", True):
        raise BadRequestError("parse_special=false is not supported: control-token text "
                              "is always parsed as the control token", param="parse_special")
    model = _model(body, registry)
    async with watch_disconnect(request.receive):
        ids = await tokenize_text(model, content)
        _, pieces, _ = await model.ready_parts()
    # tokenize_text adds the BOS the model asks for (what add_special=true means). The
    # engine prepends it before tokenizing the text, so dropping it is exactly
    # add_special=false.
    if not add_special and pieces.add_bos and ids[:1] == [pieces.bos]:
        ids = ids[1:]
    if not with_pieces:
        return JSONResponse({"tokens": ids})
    return JSONResponse({"tokens": [
        {"id": token, "piece": _piece(pieces.piece(token, special=True))} for token in ids]})


async def detokenize(request: Request, registry: ModelRegistry) -> Response:
    body = await read_json_body(request)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise BadRequestError("tokens must be an array of token ids (integers)",
                              param="tokens")
    model = _model(body, registry)
    async with watch_disconnect(request.receive):
        _, pieces, _ = await model.ready_parts()
        bad = [t for t in tokens if not 0 <= t < pieces.n_vocab]
        if bad:
            raise BadRequestError(
                f"tokens: {bad[0]} is not a token id of {model.name!r} (0 to "
                f"{pieces.n_vocab - 1})", param="tokens")
        content = await _detokenize(model, tokens)
    return JSONResponse({"content": content})


async def _detokenize(model: ServedModel, tokens: list[int]) -> str:
    # Retried once on a restarted daemon, as generation.tokenize_text retries a
    # tokenize (which has no detokenizing twin there yet).
    died: DaemonDiedError | None = None
    for _ in range(MAX_RECOVERIES + 1):
        client = await model.supervisor.wait_ready()
        try:
            return await client.detokenize(tokens, special=True)
        except DaemonDiedError as exc:
            died = exc
    raise ServiceUnavailableError(f"model {model.name!r} is not available: {died}") from died
