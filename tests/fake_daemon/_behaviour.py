"""How one fake daemon behaves: a test's script, one ``Behaviour`` per daemon start.

Everything is data: what it starts as (``Startup``), what it generates (a ``NextToken``
model over a ``FakeVocab``), which commands it refuses (``Refuse``), where it dies
(``Death``) and how slowly it works (seconds of ``trio.sleep``, free under trio's
``MockClock``). ``dataclasses.replace`` (or ``Behaviour.but``) derives a variant, e.g.
the same model with a death on the first start only.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from protocol import Command, ErrReply

from ._model import DEFAULT_VOCAB, FakeVocab, LogprobModel, NextToken, default_logprobs, letters

__all__ = ["Behaviour", "Death", "Refuse", "Startup"]

KILLED = -signal.SIGKILL


@dataclass(frozen=True)
class Startup:
    """How the daemon starts (PROTOCOL.md 2).

    ``ready``: its ready line. ``refuse``: one startup ``err <code> <detail>`` line, then
    exit with the code's status (``bad_flag`` 2, ``wrong_arch`` 3, ...). ``exit``: no line,
    exit ``status`` (negative: killed by that signal), as a crash while loading.
    ``hang``: nothing, ever (a load that never ends). ``delay_s`` passes first.
    """

    kind: Literal["ready", "refuse", "exit", "hang"] = "ready"
    code: str = "load_failed"
    detail: str = "the fake engine could not load the model"
    status: int | None = None
    delay_s: float = 0.0

    @classmethod
    def refuse(cls, code: str = "load_failed", detail: str = "the fake engine could not load "
               "the model", *, delay_s: float = 0.0) -> Startup:
        return cls("refuse", code, detail, delay_s=delay_s)

    @classmethod
    def crash(cls, status: int = KILLED, *, delay_s: float = 0.0) -> Startup:
        return cls("exit", status=status, delay_s=delay_s)


@dataclass(frozen=True)
class Death:
    """Where the daemon dies on its own (a crash, as an engine abort or the OOM killer).

    ``on``: ``"ready"`` (right after its ready line) or a command word: the ``nth`` such
    command (1-based; None: every one) kills it when it runs, or, with ``after_tokens``,
    once that command has written that many tokens to its stream (0: during its prefill,
    before any token). ``returncode`` is the exit status (negative: the signal);
    ``stderr`` its last words, which ``DaemonDiedError`` quotes.
    """

    on: str
    nth: int | None = 1
    after_tokens: int | None = None
    returncode: int = KILLED
    stderr: str = "fake: engine abort"


@dataclass(frozen=True)
class Refuse:
    """Answer the ``nth`` ``command`` (1-based; None: every one) with ``err <code>``,
    running nothing (a stream command still ends its stream with ``-1``; a protocol 2
    ``generate``/``restore`` writes nothing, 9.2)."""

    command: str
    code: str
    detail: str = "refused by the test's script"
    nth: int | None = 1

    def reply(self) -> ErrReply:
        return ErrReply(self.code, self.detail)


@dataclass(frozen=True)
class Behaviour:
    """One daemon start's script; every field has a plain default (a healthy daemon)."""

    model: NextToken = letters
    vocab: FakeVocab = DEFAULT_VOCAB
    logprobs: LogprobModel = default_logprobs
    arch: str = "qwen3"
    n_ctx_train: int = 32768
    startup: Startup = field(default_factory=Startup)
    deaths: tuple[Death, ...] = ()
    refusals: tuple[Refuse, ...] = ()
    token_delay_s: float = 0.0
    """Seconds per generated token."""
    prefill_delay_s: float = 0.0
    """Seconds per prefilled prompt token."""
    command_delay_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds a command takes before its reply, by command word."""
    bytes_per_token: int = 1024
    """Host bytes a snapshot slot takes per token it covers."""
    embed_dim: int = 4

    def but(self, **changes: Any) -> Behaviour:
        """This behaviour with ``changes``."""
        return dataclasses.replace(self, **changes)

    def death_for(self, command: Command, count: int) -> Death | None:
        return next((d for d in self.deaths if d.on == command.name
                     and d.nth in (None, count)), None)

    def refusal_for(self, command: Command, count: int) -> ErrReply | None:
        return next((r.reply() for r in self.refusals if r.command == command.name
                     and r.nth in (None, count)), None)
