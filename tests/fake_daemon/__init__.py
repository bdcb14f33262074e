"""An in-memory Lucerna daemon, for the middle layer's tests (issue 49 item 3).

A ``FakeDaemon`` speaks PROTOCOL.md through protocol/, the codec the native daemons are
held to (tests/native/test_one_source.py): it reads its stdin with
``protocol.parse_command``, answers with ``OkReply``/``ErrReply``/``DoneLine`` lines,
writes the ready line native/src/daemon/daemon.cpp writes for its role, flags and
protocol version (capabilities from PROTOCOL.md's table), and streams int32 ids and
``-1`` on protocol 1, ``encode_seq_record``/``encode_seq_end`` records on protocol 2
(a ``--parallel`` launch), or frames on one channel (``channel="stdout"``). It is no
stand-in for the engine: its "model" is a function of the context (``NextToken``).

Use::

    fakes = install(monkeypatch)           # every open_daemon_process of the test is fake
    fakes.defaults["model"] = Behaviour(model=Script({prompt: reply}))
    fakes.plan(Behaviour(deaths=(Death("generate", after_tokens=3),)))  # the first start
    ...                                    # run the real DaemonClient, Supervisor, ...
    fakes.latest().lines                   # the exact command lines it received
    fakes.latest().decoded                 # what each generation reused and produced
    fakes.latest().kill()                  # SIGKILL: the client sees DaemonDiedError

``Behaviour`` scripts one start: ``Startup`` (ready, a startup ``err``, a crash, a
hang), ``Death`` (after ready, on the nth command, mid-stream after N tokens),
``Refuse`` (``err <code>`` for the nth command), delays (``trio.sleep``, free under
``autojump_clock``). ``served_model`` and ``serving`` put a ``ServedModel`` (its
``Supervisor``, prefix cache, generation core) on them. State (sequences, snapshot
slots, snapshot files) is kept as an attention-only engine keeps it, so prefix reuse
shows in ``Decoded.reused``.
"""

from __future__ import annotations

from ._behaviour import Behaviour, Death, Refuse, Startup
from ._daemon import FakeDaemon
from ._model import (
    BOS,
    DEFAULT_VOCAB,
    EOS,
    THINK_CLOSE,
    THINK_OPEN,
    FakeVocab,
    NextToken,
    Script,
    default_logprobs,
    letters,
)
from ._seam import SEAM_MODULES, FakeDaemonProcess, FakeDaemons, fake_launch, install, kind_of
from ._served import served_model, serving
from ._state import Decoded

__all__ = [
    "BOS",
    "DEFAULT_VOCAB",
    "EOS",
    "SEAM_MODULES",
    "THINK_CLOSE",
    "THINK_OPEN",
    "Behaviour",
    "Death",
    "Decoded",
    "FakeDaemon",
    "FakeDaemonProcess",
    "FakeDaemons",
    "FakeVocab",
    "NextToken",
    "Refuse",
    "Script",
    "Startup",
    "default_logprobs",
    "fake_launch",
    "install",
    "kind_of",
    "letters",
    "served_model",
    "serving",
]
