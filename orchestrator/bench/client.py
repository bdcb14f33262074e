"""One streaming request against an OpenAI-compatible endpoint, timed as it arrives.

Works with any server that streams ``text_completion`` or ``chat.completion.chunk``
objects as SSE and ends with ``data: [DONE]``: the usage comes from the chunk that
carries it (``stream_options.include_usage``), speculative-decoding figures from
Lucerna's ``usage.speculative`` or llama-server's ``timings.draft_n`` /
``timings.draft_n_accepted``, whichever is present; the prompt tokens served from a
prefix cache from ``usage.prompt_tokens_details.cached_tokens`` (both servers report
it), else llama-server's ``timings.cache_n``.

A prompt that carries chat messages (the ``agent`` set) always goes to
``/v1/chat/completions``, as those messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from orchestrator.bench.prompts import Prompt
from orchestrator.bench.stats import RequestTiming

__all__ = ["Endpoint", "cached_tokens", "request_body", "speculative_figures", "stream_request"]

Api = Literal["completions", "chat"]


@dataclass(frozen=True)
class Endpoint:
    """Where requests go and what each one carries besides the prompt."""

    label: str
    base_url: str
    """Up to and including ``/v1``, e.g. ``http://127.0.0.1:8080/v1``."""
    model: str | None = None
    api_key: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """Merged into every request body (e.g. llama-server's ``cache_prompt``)."""
    pid: int | None = None
    """The server's process id, when known: its memory is sampled during runs."""

    @property
    def root_url(self) -> str:
        """The server root (``/health`` lives there, not under ``/v1``)."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def request_body(endpoint: Endpoint, prompt: Prompt, api: Api, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint.model:
        body["model"] = endpoint.model
    if prompt.messages is not None:
        body["messages"] = [{"role": role, "content": content}
                            for role, content in prompt.messages]
    elif api == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    body.update(endpoint.extra_body)
    return body


def _content(chunk: Mapping[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "text" in choice:  # text_completion
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or "")


def cached_tokens(usage: Mapping[str, Any] | None,
                  timings: Mapping[str, Any] | None) -> int | None:
    """Prompt tokens the server took from its cache instead of prefilling them."""
    details = (usage or {}).get("prompt_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        return int(details["cached_tokens"])
    if timings and timings.get("cache_n") is not None:
        return int(timings["cache_n"])
    return None


def speculative_figures(usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None,
                 completion_tokens: int | None) -> tuple[float | None, dict[str, Any] | None]:
    """The acceptance length and the raw figures, from whichever server reported them."""
    spec = (usage or {}).get("speculative")
    if isinstance(spec, Mapping):
        length = spec.get("acceptance_length")
        return (float(length) if length is not None else None), dict(spec)
    if timings and "draft_n" in timings:
        drafted = int(timings.get("draft_n") or 0)
        accepted = int(timings.get("draft_n_accepted") or 0)
        raw = {"draft_n": drafted, "draft_n_accepted": accepted}
        # llama-server does not count its target steps; each step yields one token of
        # its own plus the drafts it accepted, so steps = tokens - accepted.
        if completion_tokens and drafted and completion_tokens > accepted:
            return completion_tokens / (completion_tokens - accepted), raw
        return None, raw
    return None, None


async def stream_request(
    client: httpx.AsyncClient, endpoint: Endpoint, prompt: Prompt, *, api: Api = "completions",
    max_tokens: int = 128,
) -> RequestTiming:
    """Send one streaming request and record when each piece of output arrived.

    Never raises for a failed request: the error is recorded in the timing, so one
    refused request (a 503 under load, say) does not end a benchmark.
    """
    if prompt.messages is not None:
        api = "chat"
    path = "/chat/completions" if api == "chat" else "/completions"
    body = request_body(endpoint, prompt, api, max_tokens)
    timing = RequestTiming(prompt_id=prompt.id, t_sent=time.perf_counter())
    usage: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None
    try:
        async with client.stream("POST", endpoint.base_url.rstrip("/") + path, json=body,
                                 headers=endpoint.headers()) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", errors="replace")
                timing.error = f"HTTP {response.status_code}: {detail[:300]}"
                return timing
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    timing.error = f"stream error: {json.dumps(chunk['error'])[:300]}"
                    break
                if content := _content(chunk):
                    timing.output_times.append(time.perf_counter())
                    timing.text += content
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("timings"):
                    timings = chunk["timings"]
                for choice in chunk.get("choices") or []:
                    if choice.get("finish_reason"):
                        timing.finish_reason = choice["finish_reason"]
        timing.t_done = time.perf_counter()
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        timing.error = f"{type(exc).__name__}: {exc}"
        return timing
    if usage is None:
        timing.error = timing.error or "the stream carried no usage chunk"
        return timing
    timing.prompt_tokens = usage.get("prompt_tokens")
    timing.completion_tokens = usage.get("completion_tokens")
    timing.cached_tokens = cached_tokens(usage, timings)
    timing.acceptance_length, timing.speculative = speculative_figures(
        usage, timings, timing.completion_tokens)
    return timing
