"""The pinned coding agents and their install into the Lucerna cache.

Each agent installs with npm, once, into ``<cache>/clients/<name>-<version>``: npm
writes into a ``.partial`` folder beside it, the agent must then answer ``--version``
with its pinned version, and only then does the folder take its final name. A later
call finds it and returns at once; a failed or interrupted install leaves nothing
that looks installed. Concurrent installs (two test runs) serialise on a file lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemons._locking import file_lock
from daemons.paths import lucerna_cache_dir
from orchestrator.errors import ClientSetupError

__all__ = ["CLIENTS", "ClientSpec", "client_binary", "client_named", "ensure_client"]

Progress = Callable[[str], None]

INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ClientSpec:
    name: str
    title: str
    package: str
    version: str
    command: str
    """The executable the package installs (``node_modules/.bin/<command>``)."""
    endpoint: str
    """The Lucerna endpoint it speaks."""
    prompt_tokens: int
    """What its own system prompt and tools take before the user says a word, in
    gemma3-270m tokens (measured with this version against Lucerna)."""

    @property
    def directory(self) -> Path:
        return lucerna_cache_dir() / "clients" / f"{self.name}-{self.version}"


CLIENTS = (
    ClientSpec("codex", "Codex CLI", "@openai/codex", "0.169.0", "codex", "/v1/responses",
               prompt_tokens=2500),
    ClientSpec("claude-code", "Claude Code", "@anthropic-ai/claude-code", "2.1.328", "claude",
               "/v1/messages", prompt_tokens=12000),
    ClientSpec("opencode", "OpenCode", "opencode-ai", "1.18.33", "opencode",
               "/v1/chat/completions", prompt_tokens=7300),
)


def client_named(name: str) -> ClientSpec:
    for spec in CLIENTS:
        if spec.name == name:
            return spec
    raise ClientSetupError(f"unknown client {name!r}; the clients are "
                           f"{', '.join(spec.name for spec in CLIENTS)}")


def client_binary(spec: ClientSpec, directory: Path | None = None) -> Path:
    return (directory or spec.directory) / "node_modules" / ".bin" / spec.command


def ensure_client(spec: ClientSpec, progress: Progress = print) -> Path:
    """The agent's executable, installed first if it is not in the cache yet."""
    binary = client_binary(spec)
    if binary.exists():
        return binary
    with file_lock(spec.directory.parent / f".lock-{spec.name}"):
        if binary.exists():  # another process installed it while we waited
            return binary
        npm = shutil.which("npm")
        if npm is None:
            raise ClientSetupError(
                f"npm is not on PATH, and {spec.title} installs from the npm registry. "
                "Install Node.js 20 or later with npm, or skip the client tests with "
                "`bin/lucerna test --no-clients`")
        staging = spec.directory.with_name(spec.directory.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        progress(f"installing {spec.title} ({spec.package}@{spec.version}) into "
                 f"{spec.directory} with npm (once; a few hundred MB)")
        _npm_install(npm, spec, staging)
        _check_version(spec, client_binary(spec, staging))
        staging.rename(spec.directory)
    progress(f"{spec.title} {spec.version} installed")
    return binary


def _npm_install(npm: str, spec: ClientSpec, prefix: Path) -> None:
    command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
               "--no-update-notifier", "--loglevel=error", f"{spec.package}@{spec.version}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ClientSetupError(f"`{' '.join(command)}` did not finish in "
                               f"{INSTALL_TIMEOUT_S:g} s; check that the npm registry is "
                               "reachable (npm config get registry)") from None
    if result.returncode != 0:
        raise ClientSetupError(
            f"`{' '.join(command)}` failed (exit {result.returncode}):\n"
            f"{(result.stderr or result.stdout).strip()[-2000:]}\n"
            "Check that the npm registry is reachable (npm config get registry).")


def _check_version(spec: ClientSpec, binary: Path) -> None:
    if not binary.exists():
        raise ClientSetupError(f"npm installed {spec.package}@{spec.version} but no "
                               f"{binary}; the package may not support this platform")
    # A scratch HOME: asking for the version must not write into the user's.
    with tempfile.TemporaryDirectory(prefix="lucerna-client-") as home:
        env = {**os.environ, "HOME": home, "CODEX_HOME": home,
               "XDG_CONFIG_HOME": home, "XDG_DATA_HOME": home, "XDG_CACHE_HOME": home}
        try:
            result = subprocess.run([str(binary), "--version"], capture_output=True,
                                    text=True, timeout=120, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ClientSetupError(f"{binary} --version did not run: {exc}") from None
    if spec.version not in result.stdout + result.stderr:
        raise ClientSetupError(
            f"{binary} --version answered {(result.stdout + result.stderr).strip()[-500:]!r}, "
            f"not version {spec.version} (exit {result.returncode})")
