"""The multi-host tests' hosts (``daemons.netns``): skipped where they cannot be made,
except under CI (``CI`` set, as .ci/run does), where a skip would hide that the tests
never ran: there they fail."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from daemons.netns import Hosts, HostsUnavailable
from daemons.netns import open_hosts as _open_hosts

__all__ = ["Hosts", "open_hosts"]


@contextmanager
def open_hosts(workdir: Path) -> Iterator[Hosts]:
    try:
        with _open_hosts(workdir) as hosts:
            yield hosts
    except HostsUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"multi-host tests cannot run in CI: {exc}")
        pytest.skip(str(exc))
