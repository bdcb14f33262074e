"""Launch specs for real daemons on the test models, for tests that drive them via the client.

pytest-trio fixtures live as long as one test, so each test starts its own daemon; on the
tiny test models a load takes well under a second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from daemons.client import DaemonClient
from daemons.native import NativeBuild
from daemons.roles import DaemonLaunch, role_named

# Every (role, test model) that generates: the targets on each architecture they serve
# and the drafter, which answers the same commands plus compress (PROTOCOL.md section 5).
GENERATING = [
    ("qwen35", "qwen35"),
    ("qwen35", "qwen3"),
    ("laguna", "laguna"),
    ("laguna", "deepseek4"),
    ("pflash", "qwen3"),
]


@pytest.fixture(params=GENERATING, ids=[f"{role}-{model}" for role, model in GENERATING])
def generating(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(role, model)``: a test that takes it runs once for every generating pair."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def launch(
    native: NativeBuild, test_models: dict[str, Path], default_model: Path
) -> Callable[..., DaemonLaunch]:
    """``launch(role, model, **flags)``: a DaemonLaunch for a test model by name.

    ``model="default"`` is the real gemma3-270m; ``flags`` are DaemonLaunch fields.
    ``n_ctx`` defaults to 512 to keep contexts small, and ``threads`` to 1: these models
    are tiny, and ggml's spinning worker threads only slow down on a busy machine.
    """

    def make(role: str, model: str, **flags: Any) -> DaemonLaunch:
        path = default_model if model == "default" else test_models[model]
        flags.setdefault("n_ctx", 512)
        flags.setdefault("threads", 1)
        return DaemonLaunch(
            role=role_named(role), executable=native.binary(role), model=path, **flags
        )

    return make


async def greedy(
    daemon: DaemonClient, prompt: list[int], n_gen: int, *, slot: int | None = None
) -> list[int]:
    """The tokens of a greedy run that ignores end-of-generation (from ``slot`` if given)."""
    run = (
        daemon.generate(prompt, n_gen, ignore_eos=True)
        if slot is None
        else daemon.restore(slot, prompt, n_gen, ignore_eos=True)
    )
    async with run as stream:
        return await stream.collect()


@pytest.fixture(name="greedy")
def greedy_fixture() -> Callable[..., Awaitable[list[int]]]:
    """:func:`greedy`, for tests (which cannot import this conftest)."""
    return greedy
