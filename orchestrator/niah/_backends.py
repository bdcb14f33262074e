"""The two ways ``lucerna niah`` asks a model: its daemons directly, or a server's HTTP API.

Both answer the same three questions: how long is this conversation in the target's
tokens (to size haystacks), and what does the model answer with the full prompt, and
with the prompt compressed at a keep ratio. Each answer is timed the same way: from
the moment the conversation is handed over (before any tokenizing or scoring) to the
first generated token (TTFT), and to the last.

- daemon: a target daemon (``qwen35``/``laguna`` role) and a pflash drafter daemon,
  driven over PROTOCOL.md through ``daemons.client``; compression is the server's own
  ``compress_conversation`` (with the park choreography when asked), and the target's
  GGUF chat template is applied exactly as the server applies it.
- http: a running Lucerna, through ``/v1/chat/completions`` (streamed); the headers
  ``X-Lucerna-Prefill`` and ``X-Lucerna-Prefill-Keep`` pick full or compressed per
  request, so the server must have a drafter (``--prefill-compression auto``);
  lengths are counted by ``/v1/messages/count_tokens``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from daemons.client import DaemonClient, open_daemon
from daemons.gguf_info import read_gguf_info
from daemons.roles import DaemonLaunch
from orchestrator.chat_template import ChatTemplate
from orchestrator.prefill import (
    KEEP_HEADER,
    MODE_HEADER,
    CompressOptions,
    KeepRatioCurve,
    compress_conversation,
)
from protocol import PieceTable

__all__ = ["Answer", "Backend", "DaemonBackend", "HttpBackend", "open_daemon_backend"]

Messages = list[dict[str, Any]]


@dataclass(frozen=True)
class Answer:
    text: str
    ttft_s: float
    total_s: float
    prompt_tokens: int
    """Tokens the target prefilled (after compression)."""
    compress_s: float | None = None
    """The drafter's share of the TTFT (daemon mode; the server does not report it)."""
    kept_text: str | None = None
    """The compressed conversation's text (daemon mode), to tell a needle the drafter
    dropped from one the target missed."""


class Backend(Protocol):
    description: str

    async def count(self, messages: Messages) -> int: ...

    async def answer(self, messages: Messages, keep: float | None,
                     max_tokens: int) -> Answer: ...


def _piece_text(pieces: PieceTable, token: int) -> str:
    if 0 <= token < pieces.n_vocab:
        return pieces.pieces[token].decode("utf-8", errors="replace")
    return ""


class DaemonBackend:
    def __init__(self, target: DaemonClient, drafter: DaemonClient, target_pieces: PieceTable,
                 drafter_pieces: PieceTable, template: ChatTemplate, options: CompressOptions,
                 park: bool) -> None:
        self.target = target
        self.drafter = drafter
        self.target_pieces = target_pieces
        self.drafter_pieces = drafter_pieces
        self.template = template
        self.options = options
        self.park = park
        assert target.ready is not None and drafter.ready is not None
        parked = ", target parked while scoring" if park else ""
        self.description = (f"daemons: target {target.launch.model.name} ({target.ready.arch}, "
                            f"{target.ready.backend}), drafter {drafter.launch.model.name} "
                            f"({drafter.ready.arch}){parked}")

    async def _prompt(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        # As the server does (generation.prompt_ids): a template that writes BOS itself
        # must not get a second one.
        text = self.template.render(messages, add_generation_prompt=True)
        bos = self.template.bos_token
        add_bos = False if bos and text.startswith(bos) else None
        return await self.target.tokenize(text, special=True, add_bos=add_bos)

    async def count(self, messages: Messages) -> int:
        return len(await self._prompt(messages))

    async def answer(self, messages: Messages, keep: float | None,
                     max_tokens: int) -> Answer:
        started = time.perf_counter()
        compress_s = kept_text = None
        if keep is not None:
            keep_x1000 = KeepRatioCurve.flat(keep).keep_x1000(0)
            result = await compress_conversation(
                self.drafter, self.drafter_pieces, messages, keep_x1000, self.options,
                target=self.target, park_target=self.park)
            messages = result.messages
            compress_s = result.total_ms / 1000
            kept_text = "\n".join(str(m.get("content") or "") for m in messages)
        prompt = await self._prompt(messages)
        first: float | None = None
        async with self.target.generate(prompt, max_tokens) as stream:
            tokens: list[int] = []
            async for token in stream:
                first = first or time.perf_counter()
                tokens.append(token)
        ended = time.perf_counter()
        text = await self.target.detokenize(tokens) if tokens else ""
        return Answer(text, (first or ended) - started, ended - started, len(prompt), compress_s,
                      kept_text)


@asynccontextmanager
async def open_daemon_backend(target: DaemonLaunch, drafter: DaemonLaunch,
                              options: CompressOptions, *,
                              park: bool = False) -> AsyncIterator[DaemonBackend]:
    """Start both daemons; the target's GGUF chat template applies as in the server."""
    info = read_gguf_info(Path(target.model))  # niah runs its daemons on this machine
    async with AsyncExitStack() as stack:
        target_client = await stack.enter_async_context(open_daemon(target))
        drafter_client = await stack.enter_async_context(open_daemon(drafter))
        target_pieces = await target_client.piece_table()
        drafter_pieces = await drafter_client.piece_table()
        template = ChatTemplate.for_model(
            info.chat_template, bos_token=_piece_text(target_pieces, target_pieces.bos),
            eos_token=_piece_text(target_pieces, target_pieces.eos))
        if park:
            await drafter_client.park("all")
        yield DaemonBackend(target_client, drafter_client, target_pieces, drafter_pieces,
                            template, options, park)


class HttpBackend:
    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str | None) -> None:
        self.client = client
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.description = f"http: {self.root}" + (f" model {model}" if model else "")

    def _body(self, **fields: Any) -> dict[str, Any]:
        return {"model": self.model, **fields} if self.model else dict(fields)

    async def count(self, messages: Messages) -> int:
        response = await self.client.post(f"{self.root}/v1/messages/count_tokens",
                                          json=self._body(messages=messages, max_tokens=1))
        response.raise_for_status()
        return int(response.json()["input_tokens"])

    async def answer(self, messages: Messages, keep: float | None,
                     max_tokens: int) -> Answer:
        headers = {MODE_HEADER: "off"} if keep is None else {MODE_HEADER: "always",
                                                             KEEP_HEADER: f"{keep:g}"}
        body = self._body(messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
                          stream_options={"include_usage": True})
        started = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        usage: dict[str, Any] = {}
        async with self.client.stream("POST", f"{self.root}/v1/chat/completions", json=body,
                                      headers=headers) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", errors="replace")
                raise RuntimeError(f"{response.status_code} from the server: {detail[:300]}")
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if "error" in chunk:
                    raise RuntimeError(f"the server failed mid-stream: {chunk['error']}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        first = first or time.perf_counter()
                        parts.append(text)
        ended = time.perf_counter()
        return Answer("".join(parts), (first or ended) - started, ended - started,
                      int(usage.get("prompt_tokens", 0)))
