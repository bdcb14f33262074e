"""Request-field validation every dialect shares.

Each helper reads one field of a decoded JSON body and either returns it in the
type the core wants or raises ``BadRequestError`` naming the field (``param``), so
a client sees the same message for the same mistake in every dialect. Dialects
differ only in which keys they read and in their limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import BadRequestError
from orchestrator.reasoning import EFFORT_BUDGETS, ReasoningControl
from protocol import SamplingParams

__all__ = [
    "DEFAULT_SAMPLING",
    "MAX_STOP_STRINGS",
    "Basics",
    "basics",
    "boolean",
    "integer",
    "model_name",
    "number",
    "object_field",
    "reasoning_effort",
    "sampling",
    "stop_strings",
    "string",
]

MAX_STOP_STRINGS = 16
MAX_TOKENS_LIMIT = 1 << 30

# llama.cpp's defaults, used when a request leaves a sampling field out, so a
# client of any dialect sees the behaviour it would get from llama-server.
_DEFAULT_TEMPERATURE = 0.8
_DEFAULT_TOP_K = 40
_DEFAULT_TOP_P = 0.95
_DEFAULT_MIN_P = 0.05
DEFAULT_SAMPLING = {"temperature": _DEFAULT_TEMPERATURE, "top_k": _DEFAULT_TOP_K,
                    "top_p": _DEFAULT_TOP_P, "min_p": _DEFAULT_MIN_P}
"""What a request that names no sampling field gets (``GET /props`` reports it)."""


def number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{key} must be a number", param=key)
    if not low <= value <= high:
        raise BadRequestError(f"{key} must be between {low} and {high}, got {value}", param=key)
    return float(value)


def integer(body: Mapping[str, Any], key: str, low: int = 1, high: int = MAX_TOKENS_LIMIT,
            ) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{key} must be an integer", param=key)
    if not low <= value <= high:
        raise BadRequestError(f"{key} must be between {low} and {high}, got {value}", param=key)
    return value


def boolean(body: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequestError(f"{key} must be a boolean", param=key)
    return value


def string(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequestError(f"{key} must be a string", param=key)
    return value


def object_field(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    """An optional JSON object field; absent or null reads as ``{}``."""
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequestError(f"{key} must be an object", param=key)
    return value


def model_name(body: Mapping[str, Any]) -> str | None:
    return string(body, "model")


def stop_strings(body: Mapping[str, Any], key: str = "stop") -> tuple[str, ...]:
    stop = body.get(key)
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if (isinstance(stop, list) and len(stop) <= MAX_STOP_STRINGS
            and all(isinstance(s, str) for s in stop)):
        return tuple(stop)
    raise BadRequestError(f"{key} must be a string or an array of at most {MAX_STOP_STRINGS} "
                          "strings", param=key)


def sampling(body: Mapping[str, Any]) -> SamplingParams | None:
    """The sampler a request asks for; ``None`` means greedy (temperature 0).

    Reads the OpenAI names plus llama.cpp's extensions (``top_k``, ``min_p``,
    ``repeat_penalty``); Anthropic's ``temperature`` / ``top_p`` / ``top_k`` share them.
    """
    temperature = number(body, "temperature", 0.0, 2.0)
    temperature = _DEFAULT_TEMPERATURE if temperature is None else temperature
    top_p = number(body, "top_p", 0.0, 1.0)
    top_k = integer(body, "top_k", 0, 1 << 20)
    min_p = number(body, "min_p", 0.0, 1.0)
    freq = number(body, "frequency_penalty", -2.0, 2.0)
    pres = number(body, "presence_penalty", -2.0, 2.0)
    rep = number(body, "repeat_penalty", 0.0, 10.0)
    seed = integer(body, "seed", -(1 << 63), (1 << 64) - 1)
    if temperature == 0.0:
        return None  # greedy: penalties and truncation change nothing about the argmax path
    return SamplingParams(
        temp=temperature,
        top_k=_DEFAULT_TOP_K if top_k is None else top_k,
        top_p=_DEFAULT_TOP_P if top_p is None else top_p,
        min_p=_DEFAULT_MIN_P if min_p is None else min_p,
        rep_pen=rep if rep is not None else 1.0,
        freq_pen=freq or 0.0,
        pres_pen=pres or 0.0,
        seed=None if seed is None else seed & 0xFFFFFFFF,
    )


@dataclass(frozen=True)
class Basics:
    """The fields every dialect has, under whatever names it gives them."""

    model: str | None
    stream: bool
    max_tokens: int | None
    sampling: SamplingParams | None
    stop: tuple[str, ...]
    lookup: bool | None = None
    """Lucerna's ``lookup``: prompt lookup on (true) or off (false) for this request
    (PROTOCOL.md 5.9); None: the model's ``lookup`` setting decides."""


def basics(body: Mapping[str, Any], *, max_tokens: tuple[str, ...] = ("max_tokens",),
           stop: str | None = "stop") -> Basics:
    """Read the common fields; ``max_tokens`` lists the limit's names, preferred first."""
    limit = next((v for v in (integer(body, key) for key in max_tokens) if v is not None), None)
    return Basics(
        model=model_name(body),
        stream=boolean(body, "stream"),
        max_tokens=limit,
        sampling=sampling(body),
        stop=stop_strings(body, stop) if stop else (),
        lookup=None if body.get("lookup") is None else boolean(body, "lookup"),
    )


def reasoning_effort(effort: object, param: str) -> ReasoningControl | None:
    """A reasoning effort as the request named it at ``param`` (``reasoning_effort``,
    ``reasoning.effort``); None when it named none."""
    if effort is None:
        return None
    if effort not in EFFORT_BUDGETS:
        raise BadRequestError(f"{param} must be one of {', '.join(EFFORT_BUDGETS)}, "
                              f"got {effort!r}", param=param)
    return ReasoningControl.from_effort(str(effort))
