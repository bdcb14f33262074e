"""PFlash in the server: a model's drafter daemon and the compression of its requests.

``PrefillCompressor`` hangs off a ``ServedModel`` (``model.prefill``). The core calls
``apply`` once a request's turn has come (``generation.prepare_generation``): a long
enough conversation is compressed by the drafter (``compress_conversation``), the
shortened messages are rendered with the target's own template and tokenized by the
target, and the request continues with that prompt, ``compressed_tokens`` telling
usage how much was cut. Anything that goes wrong on the drafter's side (not ready,
died, context too small) leaves the request uncompressed: compression is an
optimisation, never a reason to fail a request.

The drafter is a pflash daemon supervised exactly like the target (same Supervisor,
same restarts); a drafter that cannot be brought back turns compression off for the
model rather than stopping the server. In proxy mode there is no target: the model's
own daemon is the drafter, and ``upstream_events`` replaces local generation.

The model holds its compressor, so this package never imports the model: ``apply``
reaches the target through ``CompressionTarget`` (what it needs of a ``ServedModel``)
and renders prompts through the ``tokenize`` it is handed.

Per request, two headers adjust the policy (the NIAH driver sweeps keep ratios
through them): ``X-Lucerna-Prefill: off|auto|always`` and
``X-Lucerna-Prefill-Keep: <ratio or T:R curve>``.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from daemons.client import DaemonClient
from daemons.errors import DaemonError
from daemons.roles import DaemonLaunch
from orchestrator.chat_template import ChatTemplate
from orchestrator.errors import BadRequestError, DaemonUnrecoverableError, ServiceUnavailableError
from orchestrator.events import Conversation, Event, GenerationRequest
from orchestrator.prefill._conversation import CompressionSkipped, compress_conversation
from orchestrator.prefill._curve import KeepRatioCurve
from orchestrator.prefill._proxy import upstream_events
from orchestrator.prefill._settings import MODES, Mode, PrefillSettings, UpstreamSettings
from orchestrator.prefix_cache import PrefixCache
from orchestrator.supervisor import RestartPolicy, Supervisor
from protocol import PieceTable

__all__ = ["KEEP_HEADER", "MODE_HEADER", "CompressionTarget", "PrefillCompressor", "Tokenize"]

log = logging.getLogger("lucerna.prefill")

MODE_HEADER = "x-lucerna-prefill"
KEEP_HEADER = "x-lucerna-prefill-keep"
DRAFTER_WAIT_S = 120.0
EXACT_CACHE_PROMPTS = 64
"""Raw prompts whose compression the exact prefill cache remembers."""


Tokenize = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None],
                    Awaitable[list[int]]]
"""Messages and tools -> the target's prompt ids, rendered with its chat template
(``generation.prompt_ids`` bound to the model)."""


class CompressionTarget(Protocol):
    """What ``apply`` needs of the model it compresses for (a ``ServedModel``)."""

    @property
    def supervisor(self) -> Supervisor: ...

    @property
    def prefix_cache(self) -> PrefixCache | None: ...

    async def ready_parts(self) -> tuple[DaemonClient, PieceTable, ChatTemplate]: ...


class PrefillCompressor:
    """One model's PFlash: its drafter (or, in proxy mode, its upstream) and policy."""

    def __init__(self, name: str, settings: PrefillSettings, drafter: DaemonLaunch | None, *,
                 restart_policy: RestartPolicy | None = None) -> None:
        self.name = name
        self.settings = settings
        self.upstream: UpstreamSettings | None = settings.upstream
        # None in proxy mode, where the model's own daemon is the drafter.
        self.supervisor = None if drafter is None else Supervisor(
            f"{name} (drafter)", drafter, policy=restart_policy, on_ready=self._on_ready)
        self._pieces: PieceTable | None = None
        self.compressed = 0
        """Requests compressed so far."""
        self.exact_hits = 0
        """Requests whose compression came from ``_exact`` instead of the drafter."""
        # The exact prefill cache: (raw prompt, keep, options) -> the compressed request's
        # messages and ids, so a prompt seen before skips the drafter (and, with the
        # compressed prompt's end marked, the target finds its state in the prefix cache).
        self._exact: OrderedDict[str, tuple[tuple[Mapping[str, Any], ...], list[int]]] = (
            OrderedDict())

    def describe(self) -> str:
        """One line for the startup log: what compresses, when, and where answers come from."""
        s = self.settings
        when = {"off": "off", "always": "always",
                "auto": f"prompts of {s.threshold}+ tokens"}[s.mode]
        drafter = (f"drafter {self.supervisor.launch.model.name}"
                   if self.supervisor is not None else "this model drafts")
        text = f"PFlash compression {when}, keep {s.curve}, {drafter}"
        if s.park_target:
            text += ", target parked while it scores"
        if self.upstream is not None:
            text += f"; proxy to {self.upstream.url}"
        return text

    async def run(self) -> None:
        """Keep the drafter running (a task in the server's nursery, like a supervisor)."""
        if self.supervisor is None:
            return
        try:
            await self.supervisor.run()
        except DaemonUnrecoverableError as exc:
            log.critical("model %s: prefill compression is off from now on: %s", self.name, exc)

    async def _on_ready(self, client: DaemonClient) -> None:
        self._pieces = await client.piece_table()
        if self.settings.park_target:
            # Resident only while it scores: the target has the device the rest of the time.
            await client.park("all")

    def policy(self, headers: Mapping[str, str]) -> tuple[Mode, KeepRatioCurve]:
        """The request's mode and keep ratios: the model's, adjusted by the headers."""
        mode: Mode = self.settings.mode
        curve = self.settings.curve
        wanted = headers.get(MODE_HEADER)
        if wanted is not None:
            if wanted not in MODES:
                raise BadRequestError(f"header {MODE_HEADER}: unknown mode {wanted!r}; use one "
                                      f"of {', '.join(MODES)}")
            mode = wanted  # checked against MODES above
        keep = headers.get(KEEP_HEADER)
        if keep is not None:
            try:
                curve = KeepRatioCurve.parse(keep)
            except ValueError as exc:
                raise BadRequestError(f"header {KEEP_HEADER}: {exc}") from None
        return mode, curve

    async def apply(self, generation: GenerationRequest, headers: Mapping[str, str], *,
                    target: CompressionTarget, tokenize: Tokenize) -> GenerationRequest:
        """``generation`` with its prompt compressed when the policy says so; ``target``
        is the model it is for, whose chat template ``tokenize`` renders with."""
        conversation = generation.conversation
        if conversation is None:
            if self.upstream is not None:
                raise BadRequestError("this model is a compression proxy, which forwards chat "
                                      "requests only; use /v1/chat/completions, /v1/messages "
                                      "or /v1/responses")
            return generation
        mode, curve = self.policy(headers)
        n_prompt = len(generation.prompt)
        if mode == "off" or (mode == "auto" and n_prompt < self.settings.threshold):
            return generation
        keep_x1000 = curve.keep_x1000(n_prompt)
        if keep_x1000 >= 1000:
            return generation
        use_exact = target.prefix_cache is not None and target.prefix_cache.enabled
        key = self._exact_key(generation.prompt, keep_x1000)
        if use_exact and key in self._exact:
            self._exact.move_to_end(key)
            messages, prompt = self._exact[key]
            self.exact_hits += 1
            log.info("model %s: prompt %d -> %d tokens from the exact prefill cache", self.name,
                     n_prompt, len(prompt))
            return self._compressed(generation, list(messages), prompt)
        drafter = await self._drafter(target)
        if drafter is None:
            return generation
        client, pieces = drafter
        to_park = None
        if self.supervisor is not None and self.settings.park_target:
            to_park = target.supervisor.ready_client()
        try:
            result = await compress_conversation(
                client, pieces, conversation.messages, keep_x1000, self.settings.options,
                target=to_park, park_target=to_park is not None)
        except CompressionSkipped as exc:
            log.warning("model %s: prompt of %d tokens left uncompressed: %s", self.name,
                        n_prompt, exc)
            return generation
        except DaemonError as exc:
            log.error("model %s: the drafter failed (%s); serving the prompt uncompressed",
                      self.name, exc)
            return generation
        prompt = await tokenize(result.messages, conversation.tools)
        if len(prompt) >= n_prompt:
            return generation
        self.compressed += 1
        log.info("model %s: prompt %d -> %d tokens (keep %.3f; drafter scored %d tokens, kept "
                 "%d, in %.0f ms of %.0f ms%s)", self.name, n_prompt, len(prompt),
                 keep_x1000 / 1000, result.n_scored, result.n_kept, result.compress_ms,
                 result.total_ms,
                 f"; last user message re-appended ({result.requeried})" if result.requeried
                 else "")
        if use_exact:
            self._exact[key] = (tuple(result.messages), prompt)
            while len(self._exact) > EXACT_CACHE_PROMPTS:
                self._exact.popitem(last=False)
        return self._compressed(generation, result.messages, prompt)

    def _exact_key(self, prompt: list[int], keep_x1000: int) -> str:
        digest = hashlib.sha256(struct.pack(f"<{len(prompt)}i", *prompt))
        digest.update(repr((keep_x1000, self.settings.options)).encode())
        return digest.hexdigest()

    @staticmethod
    def _compressed(generation: GenerationRequest, messages: Sequence[Mapping[str, Any]],
                    prompt: list[int]) -> GenerationRequest:
        conversation = generation.conversation
        assert conversation is not None
        # The whole compressed prompt is the one mark: the prefix cache snapshots it, so
        # the same raw prompt again prefills nothing.
        return replace(generation, prompt=prompt,
                       compressed_tokens=len(generation.prompt) - len(prompt),
                       marks=(len(prompt),),
                       conversation=Conversation(tuple(messages), conversation.tools))

    async def _drafter(self,
                       target: CompressionTarget) -> tuple[DaemonClient, PieceTable] | None:
        if self.supervisor is None:  # proxy mode: the model's own daemon drafts
            client, pieces, _ = await target.ready_parts()
            return client, pieces
        try:
            client = await self.supervisor.wait_ready(DRAFTER_WAIT_S)
        except ServiceUnavailableError as exc:
            log.warning("model %s: prompt left uncompressed: %s", self.name, exc)
            return None
        assert self._pieces is not None  # loaded before the supervisor reports ready
        return client, self._pieces

    def upstream_events(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        """Proxy mode: the upstream's answer to ``request`` as the core's events."""
        assert self.upstream is not None
        return upstream_events(self.upstream, request, self.name)
