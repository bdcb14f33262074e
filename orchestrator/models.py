"""A model served by Lucerna: its daemon's supervisor plus what the front end derives from it.

The piece table and the chat template's special tokens come from the daemon (the
engine is the one source of truth for the vocabulary); the template text and the
architecture come from the GGUF itself.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from daemons.client import DaemonClient
from daemons.gguf_info import GGUFInfo
from daemons.roles import DaemonLaunch
from orchestrator.chat_template import ChatTemplate
from orchestrator.errors import ModelNotFoundError, ServiceUnavailableError
from orchestrator.events import Event
from orchestrator.parallel_default import ParallelChoice
from orchestrator.prefill import PrefillCompressor
from orchestrator.prefix_cache import PrefixCache
from orchestrator.reasoning import ReasoningControl
from orchestrator.residency import Residence, Residency
from orchestrator.scheduler import RequestQueue
from orchestrator.supervisor import RestartPolicy, Supervisor
from protocol import PieceTable

__all__ = ["OUTPUT_CAP_CONTEXT_SHARE", "ModelRegistry", "ServedModel"]

OUTPUT_CAP_CONTEXT_SHARE = 4
"""Without ``max_output_tokens``, a request may generate at most n_ctx / this."""
TOKEN_MEMO_PIECES = 1024
"""Prompt pieces (chat messages as rendered) whose token ids a model remembers."""
REPLY_MEMO_REPLIES = 64
"""Generated replies whose token ids a model remembers, to put back where a later
prompt quotes them (see ``ServedModel.find_reply``)."""
MIN_REPLY_CHARS = 8


@dataclass
class ServedModel:
    name: str
    info: GGUFInfo
    launch: DaemonLaunch
    queue_limit: int = 16
    # Server-side cap on output tokens per request, whatever the request asks; None
    # means the default, a share of the context (``output_cap``).
    max_output_tokens: int | None = None
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    created: int = field(default_factory=lambda: int(time.time()))
    pieces: PieceTable | None = None
    template: ChatTemplate | None = None
    supervisor: Supervisor = field(init=False)
    queue: RequestQueue = field(init=False)
    # Called with every event a generation on this model yields (metrics count tokens
    # and time the first output here); observers must be quick and must not raise.
    observers: list[Callable[[ServedModel, Event], None]] = field(default_factory=list)
    # PFlash speculative prefill: the drafter that compresses long prompts, or (proxy
    # mode) the upstream that generates; None when compression is off.
    prefill: PrefillCompressor | None = None
    # The prefix cache's RAM and disk tiers (orchestrator/prefix_cache.py); None: off.
    prefix_cache: PrefixCache | None = None
    # Token ids of rendered prompt pieces, keyed by (text, is first piece); LRU.
    token_memo: OrderedDict[tuple[str, bool], list[int]] = field(default_factory=OrderedDict)
    # Text of a generated reply -> the ids generated for it; LRU.
    reply_memo: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)
    # Models on demand (orchestrator/residency.py): this model's policy and state, and
    # the server's ``Residency`` that wakes and parks it (None: always resident).
    residence: Residence = field(default_factory=Residence)
    residency: Residency | None = None
    # Thinking models: the reasoning a request gets when it asks for nothing else
    # (``reasoning_effort`` / ``reasoning_budget`` in its [[models]] table).
    reasoning: ReasoningControl = field(default_factory=ReasoningControl)
    # "mean" or "last": POST /v1/embeddings pools this model's hidden states so (the
    # daemon's embed, PROTOCOL.md 5.11); None: not configured for embeddings.
    embeddings: str | None = None
    # ds4 shards whose devices the target uses over ggml RPC (``[[shards]]``), each
    # supervised on its own; the target starts once they are ready.
    shards: tuple[Supervisor, ...] = ()
    # How ``parallel`` was chosen (configured, or fitted to the memory), for /props and
    # /status; None: built by hand (tests), ``launch.parallel`` as given.
    parallel_choice: ParallelChoice | None = None

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.name, self.launch, policy=self.restart_policy,
                                     on_ready=self._on_ready,
                                     on_demand=self.residence.load == "on_demand",
                                     needs=self.shards)
        self.queue = RequestQueue(self.queue_limit, on_turn=self.wake, parallel=self.parallel)

    def remember_tokens(self, key: tuple[str, bool], ids: list[int]) -> None:
        self.token_memo[key] = ids
        self.token_memo.move_to_end(key)
        while len(self.token_memo) > TOKEN_MEMO_PIECES:
            self.token_memo.popitem(last=False)

    def remember_reply(self, ids: list[int]) -> None:
        """Remember the ids a generation produced, under the text they decode to."""
        if self.pieces is None or not ids:
            return
        text = self.pieces.render(ids).decode("utf-8", errors="replace")
        if len(text) < MIN_REPLY_CHARS:
            return
        self.reply_memo[text] = list(ids)
        self.reply_memo.move_to_end(text)
        while len(self.reply_memo) > REPLY_MEMO_REPLIES:
            self.reply_memo.popitem(last=False)

    def find_reply(self, piece: str) -> tuple[int, str, list[int]] | None:
        """The longest remembered reply that ``piece`` quotes: where, its text, its ids.

        An agent sends the model's earlier replies back in its history; re-tokenizing the
        text may give other ids than the ones generated (and then the daemon's state
        after them could not be reused), so the prompt takes the generated ids instead.
        """
        best: tuple[int, str, list[int]] | None = None
        for text, ids in self.reply_memo.items():
            if best is not None and len(text) <= len(best[1]):
                continue
            at = piece.find(text)
            if at >= 0:
                best = (at, text, ids)
        return best

    async def wake(self) -> None:
        """Before a generation: start or unpark the model if it sleeps (models on demand)."""
        if self.residency is not None:
            await self.residency.wake(self)

    async def _on_ready(self, client: DaemonClient) -> None:
        self.residence.parked = False  # a new daemon starts with its weights loaded
        if self.prefix_cache is not None:
            self.prefix_cache.daemon_started(client)
        pieces = await client.piece_table()
        self.pieces = pieces
        self.template = ChatTemplate.for_model(
            self.info.chat_template,
            bos_token=_piece_text(pieces, pieces.bos),
            eos_token=_piece_text(pieces, pieces.eos),
        )

    @property
    def parallel(self) -> int:
        """Requests that generate at once, each on a daemon sequence of its own."""
        return self.launch.parallel or 1

    @property
    def parallel_status(self) -> dict[str, object]:
        """``parallel`` and how it was chosen (``/props``, ``/status``)."""
        if self.parallel_choice is None:
            return {"parallel": self.parallel, "source": "configured",
                    "spare_sequences": self.launch.spare_sequences or 0}
        return self.parallel_choice.status()

    @property
    def n_ctx(self) -> int:
        """The context each request is promised: the daemon's KV pool holds this much for
        each of the ``parallel`` requests that generate at once (docs/batching.md; its
        spare sequences keep their conversations in what those leave free)."""
        client = self.supervisor.client
        if client is not None and client.ready is not None:
            return client.ready.n_ctx // self.parallel
        return (self.launch.n_ctx or 0) // self.parallel

    @property
    def context_limit(self) -> int:
        """The most tokens one request may hold: its promised ``n_ctx``, or with several
        sequences the whole pool up to the training context, taking what the others leave
        free (the daemon preempts when the pool runs short, PROTOCOL.md 9.6)."""
        client = self.supervisor.client
        if self.parallel == 1 or client is None or client.ready is None:
            return self.n_ctx
        ready = client.ready
        return min(ready.n_ctx, ready.n_ctx_train) if ready.n_ctx_train > 0 else ready.n_ctx

    @property
    def output_cap(self) -> int:
        """The most tokens one request may generate: ``max_output_tokens``, else a
        quarter of the context. Agents ask for far more than a turn needs (Claude Code
        sends ``max_tokens`` 32000), and a weak model that never stops on its own would
        otherwise decode until the context is full."""
        if self.max_output_tokens is not None:
            return self.max_output_tokens
        return max(1, self.n_ctx // OUTPUT_CAP_CONTEXT_SHARE)

    def observe(self, event: Event) -> None:
        for observer in self.observers:
            observer(self, event)

    async def ready_parts(self) -> tuple[DaemonClient, PieceTable, ChatTemplate]:
        """The daemon and what the front end reads from it, waiting through a restart
        (a request that arrives while a crashed daemon comes back waits, as if queued)."""
        client = await self.supervisor.wait_ready()
        if self.pieces is None or self.template is None:
            raise ServiceUnavailableError(f"model {self.name!r} is still loading")
        return client, self.pieces, self.template


def _piece_text(pieces: PieceTable, token: int) -> str:
    if 0 <= token < pieces.n_vocab:
        return pieces.pieces[token].decode("utf-8", errors="replace")
    return ""


class ModelRegistry:
    def __init__(self, models: list[ServedModel], default: str | None = None,
                 group_memory_mib: Mapping[str, int] | None = None) -> None:
        self._models = {m.name: m for m in models}
        # Wakes, parks and stops them (models on demand); the server runs its idle watch.
        self.residency = Residency(models, group_memory_mib)
        # The model of a request that names none (``[server] default_model``); a lone
        # model is the default anyway. With several and no default, naming none is a 404.
        self.default = default if default in self._models else None
        # Called with the model each request is routed to (metrics label requests by it).
        self.route_observers: list[Callable[[ServedModel], None]] = []

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def get(self, name: str | None) -> ServedModel:
        model = None
        if name is None and self.default is not None:
            model = self._models[self.default]
        elif name is None and len(self._models) == 1:
            model = next(iter(self._models.values()))
        elif name is not None:
            model = self._models.get(name)
        if model is not None:
            for observer in self.route_observers:
                observer(model)
            return model
        raise ModelNotFoundError(
            f"The model {name!r} does not exist. Available: {', '.join(self._models)}",
            param="model",
        )
