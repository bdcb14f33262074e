"""Where the fake plugs in: ``daemons.process.open_daemon_process``.

Every daemon of the orchestrator is opened there (``daemons.client.open_daemon`` and
``orchestrator.slots.open_slot_client`` import it by name; ``SEAM_MODULES`` lists them
and tests/test_fake_daemon.py fails when another module starts importing it). ``install``
replaces it in those modules with ``FakeDaemons.open_daemon_process``, which yields the
real ``DaemonProcess`` on a ``FakeProcess``: its pumps, exit watcher, ``died()`` and
``aclose()`` run unchanged, so ``DaemonClient``, ``CommandChannel``,
``GenerationStream``, ``BatchClient``, ``SlotClient``, the ``Supervisor`` and everything
above them run unchanged too. Only signalling differs: ``kill`` goes to the fake, never
to ``os.killpg``.
"""

from __future__ import annotations

import importlib
import signal
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from daemons.process import DaemonProcess
from daemons.roles import DaemonLaunch, role_named

from ._behaviour import Behaviour
from ._daemon import FakeDaemon

__all__ = ["SEAM_MODULES", "FakeDaemonProcess", "FakeDaemons", "fake_launch", "install",
           "kind_of"]

SEAM_MODULES = ("daemons.client", "orchestrator.slots")
"""The modules that import ``open_daemon_process`` by name: where ``install`` patches it."""
FAKE_STREAM_FD = 3
"""The ``--stream-fd`` a fake's command line names (it has no fds)."""


def kind_of(launch: DaemonLaunch) -> str:
    """``"tokenizer"`` for the parked tokenizer beside a ``--parallel`` daemon
    (orchestrator/slots.py starts it so), else ``"model"``."""
    return "tokenizer" if launch.parked else "model"


def fake_launch(role: str = "qwen35", **fields: Any) -> DaemonLaunch:
    """A ``DaemonLaunch`` whose paths name nothing: only a fake can start it."""
    return DaemonLaunch(role=role_named(role), executable=Path(f"/fake/bin/lucerna-{role}"),
                        model=Path("/fake/models/model.gguf"), **fields)


class FakeDaemonProcess(DaemonProcess):
    """The real ``DaemonProcess`` over a ``FakeDaemon``; ``kill`` signals the fake."""

    def __init__(self, launch: DaemonLaunch, fake: FakeDaemon) -> None:
        stream = None if fake.one_channel else fake.process.stream_pipe.reader
        super().__init__(launch, fake.process, fake.argv, stream)  # type: ignore[arg-type]
        self.fake = fake

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        self.fake.signal(sig)


class FakeDaemons:
    """Every fake daemon started while installed, and the script of the next starts.

    A start takes the next ``Behaviour`` planned for its kind (``plan``), else the
    kind's default (``defaults``).
    """

    def __init__(self) -> None:
        self.started: list[FakeDaemon] = []
        self.defaults: dict[str, Behaviour] = {"model": Behaviour(), "tokenizer": Behaviour()}
        self._plans: dict[str, deque[Behaviour]] = defaultdict(deque)

    def plan(self, *behaviours: Behaviour, kind: str = "model") -> None:
        """The next starts of ``kind`` behave so, one each, in order."""
        self._plans[kind].extend(behaviours)

    def of(self, kind: str = "model") -> list[FakeDaemon]:
        """The daemons of ``kind`` started so far, oldest first."""
        return [fake for fake in self.started if kind_of(fake.launch) == kind]

    def latest(self, kind: str = "model") -> FakeDaemon:
        return self.of(kind)[-1]

    def spawn(self, launch: DaemonLaunch) -> FakeDaemon:
        """A fake process for ``launch``, not yet running (``FakeDaemon.run``)."""
        kind = kind_of(launch)
        plan = self._plans[kind]
        behaviour = plan.popleft() if plan else self.defaults[kind]
        one_channel = launch.channel == "stdout"
        fake = FakeDaemon(launch, behaviour,
                          launch.argv(stream_fd=None if one_channel else FAKE_STREAM_FD))
        self.started.append(fake)
        return fake

    @asynccontextmanager
    async def open_daemon_process(self, launch: DaemonLaunch, *,
                                  ready_timeout: float = 600.0) -> AsyncIterator[DaemonProcess]:
        """``daemons.process.open_daemon_process``, on a fake: the same tasks around the
        same ``DaemonProcess``, the same errors (the caller's own, not a group)."""
        fake = self.spawn(launch)
        daemon = FakeDaemonProcess(launch, fake)
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_outside_the_callers_scope, fake)
                if fake.one_channel:
                    nursery.start_soon(daemon._pump_channel, fake.process.stdout)
                    if launch.link_timeout_s is not None:
                        nursery.start_soon(daemon._watch_link, launch.link_timeout_s)
                else:
                    nursery.start_soon(daemon._pump_stdout, fake.process.stdout)
                nursery.start_soon(daemon._pump_stderr, fake.process.stderr)
                nursery.start_soon(daemon._watch_exit)
                try:
                    daemon.ready = await daemon._await_ready(ready_timeout)
                    yield daemon
                except BaseException as exc:
                    failure = exc
                finally:
                    await daemon.aclose()
                    nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
        finally:
            fake.kill()  # only when the nursery itself failed: otherwise it is gone


async def _outside_the_callers_scope(fake: FakeDaemon) -> None:
    """A process lives on when its parent's task is cancelled: it answers the ``quit``
    of the shielded ``aclose``, or is killed by it. Only its own death ends it."""
    with trio.CancelScope(shield=True):
        await fake.run()


def install(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    """Make every daemon the orchestrator opens a fake, for one test; the registry."""
    fakes = FakeDaemons()
    for name in SEAM_MODULES:
        monkeypatch.setattr(importlib.import_module(name), "open_daemon_process",
                            fakes.open_daemon_process)
    return fakes
