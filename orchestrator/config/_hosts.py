"""Where a model's daemon runs: the ``DaemonLaunch`` fields a ``[[hosts]]`` entry sets.

A daemon on a host is started through the host's launcher and speaks on one channel
(PROTOCOL.md 10), so the launcher need carry only stdin, stdout and stderr (ssh).
Paths are the host's: its executables are ``daemon_dir`` (by default the build of the
host's ``backend`` in its checkout, ``<checkout>/build/native-<backend>/bin``, which
``LUCERNA_BACKEND=<backend> bin/lucerna setup`` makes there: ``host_setup_argv``, run by
``lucerna setup --config``), its model files are
looked up by file name in ``model_dir``. The front end reads the GGUF header from the
local copy named by the model's ``path`` (docs/hosts.md says why).
"""

from __future__ import annotations

import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from daemons.paths import repo_root
from daemons.roles import RoleSpec
from orchestrator.config._schema import HostSettings

__all__ = ["host_launch_fields", "host_setup_argv", "remote_file"]


def remote_file(host: HostSettings, local: Path) -> PurePosixPath:
    """The host's copy of a local file: same name in ``model_dir`` (default: same path)."""
    if host.model_dir is None:
        return PurePosixPath(local)
    return PurePosixPath(host.model_dir) / local.name


def checkout(host: HostSettings) -> PurePosixPath:
    return PurePosixPath(host.checkout) if host.checkout else PurePosixPath(repo_root())


def daemon_dir(host: HostSettings) -> PurePosixPath:
    if host.daemon_dir is not None:
        return PurePosixPath(host.daemon_dir)
    return checkout(host) / "build" / f"native-{host.backend}" / "bin"


def host_setup_argv(host: HostSettings) -> list[str]:
    """``lucerna setup`` on the host, through its launcher, for its backend: the build
    that ``daemon_dir`` then points at (``LUCERNA_BACKEND`` selects it there)."""
    words = ["env", f"LUCERNA_BACKEND={host.backend}", str(checkout(host) / "bin" / "lucerna"),
             "setup"]
    return [*host.launcher, *([shlex.quote(w) for w in words] if host.remote_shell else words)]


def host_launch_fields(host: HostSettings, role: RoleSpec, model: Path,
                       draft: Path | None) -> dict[str, Any]:
    """``DaemonLaunch`` keyword arguments for a daemon of ``role`` on ``host``."""
    return {
        "executable": daemon_dir(host) / role.executable,
        "model": remote_file(host, model),
        "draft": None if draft is None else remote_file(host, draft),
        "launcher": host.launcher,
        "channel": "stdout",
        "keepalive_ms": round(host.keepalive_s * 1000),
        "link_timeout_s": host.link_timeout_s,
        "host": host.name,
        "remote_shell": host.remote_shell,
        "scratch_dir": PurePosixPath(host.scratch_dir),
    }
