"""Hosts on one machine: network namespaces joined by veth pairs, and an sshd inside one.

For the multi-host tests (tests/_netns.py) and benchmark (bin/hosts-bench): nothing
here is a stand-in for the network, only for the second machine. ``open_hosts`` makes
two namespaces that stand for two machines::

    this machine (front end)  --veth "link"--  far (sshd, target daemons)  --veth--  shard

Names carry a random tag (``lc<6 hex>``), and each link its own random /30 in 10.64/10,
so tests that run at once never clash; everything is removed afterwards, whatever
happened (namespaces, veths, the sshd, every process left inside).

``far.ssh`` is a launcher (``ssh ... root@<far address>``) that carries only stdin,
stdout and stderr, and whose TCP connection crosses the "link" veth, so taking that
veth down cuts it as a network fault would. It needs root (namespaces) and sshd
(``bin/lucerna test`` installs openssh-server where it can); without either it raises
``HostsUnavailable`` with the reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SSHD", "Host", "Hosts", "HostsUnavailable", "open_hosts"]

SSHD = "/usr/sbin/sshd"


class HostsUnavailable(Exception):
    """Namespaces, veth pairs or sshd cannot be had here; the message says why."""


def require(reason: str) -> None:
    raise HostsUnavailable(reason)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    """A namespace: its name, its address on the link toward the front end."""

    netns: str
    address: str
    ssh: tuple[str, ...] = ()
    """A launcher into it over ssh (set once its sshd runs)."""
    ns_exec: tuple[str, ...] = field(default_factory=tuple)
    """A launcher into it without the network: ``ip netns exec <netns>``."""


@dataclass
class Hosts:
    far: Host
    shard: Host
    shard_address: str
    """The shard's address on the far<->shard link (what a target in ``far`` dials)."""
    link: str
    """The front end's end of the veth to ``far``: down it goes to cut the link."""
    shard_link: str
    """``far``'s end of the veth to ``shard``."""

    def cut(self) -> None:
        """Cut the link between this machine and ``far`` (ssh)."""
        _run("ip", "link", "set", self.link, "down")

    def restore(self) -> None:
        _run("ip", "link", "set", self.link, "up")

    def cut_shard(self) -> None:
        """Cut the link between ``far`` and ``shard`` (ggml RPC)."""
        _run("ip", "-n", self.far.netns, "link", "set", self.shard_link, "down")

    def restore_shard(self) -> None:
        _run("ip", "-n", self.far.netns, "link", "set", self.shard_link, "up")


def _subnet() -> tuple[str, str]:
    """Two addresses of a random /30 in 10.64.0.0/10."""
    value = secrets.randbelow(1 << 20) << 2  # 22 bits of 10.64/10 in /30 steps
    base = (10 << 24) | (64 << 16) | value

    def dotted(n: int) -> str:
        return ".".join(str((n >> s) & 255) for s in (24, 16, 8, 0))
    return dotted(base + 1), dotted(base + 2)


def _wait_port(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {address}:{port} after {timeout} s")


@contextmanager
def open_hosts(workdir: Path) -> Iterator[Hosts]:
    if os.geteuid() != 0:
        require("network namespaces need root")
    if shutil.which("ip") is None:
        require("the ip command (iproute2) is not installed")
    if not Path(SSHD).exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        require("sshd or ssh is not installed (bin/lucerna test installs openssh-server "
                "as root on Debian)")
    tag = f"lc{secrets.token_hex(3)}"
    far_ns, shard_ns = f"{tag}far", f"{tag}shd"
    link, link_peer, shard_link, shard_peer = f"{tag}l0", f"{tag}l1", f"{tag}s0", f"{tag}s1"
    sshd: subprocess.Popen[bytes] | None = None
    made: list[str] = []
    try:
        try:
            for ns in (far_ns, shard_ns):
                _run("ip", "netns", "add", ns)
                made.append(ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "add", link, "type", "veth", "peer", "name", link_peer)
        except (subprocess.CalledProcessError, OSError) as exc:
            stderr = getattr(exc, "stderr", b"") or b""
            require(f"cannot create network namespaces or veth pairs: {exc} "
                    f"{stderr.decode(errors='replace').strip()}")
        here, far_addr = _subnet()
        _run("ip", "link", "set", link_peer, "netns", far_ns)
        _run("ip", "addr", "add", f"{here}/30", "dev", link)
        _run("ip", "link", "set", link, "up")
        _run("ip", "-n", far_ns, "addr", "add", f"{far_addr}/30", "dev", link_peer)
        _run("ip", "-n", far_ns, "link", "set", link_peer, "up")
        # far <-> shard
        _run("ip", "-n", far_ns, "link", "add", shard_link, "type", "veth", "peer", "name",
             shard_peer)
        _run("ip", "-n", far_ns, "link", "set", shard_peer, "netns", shard_ns)
        far_side, shard_addr = _subnet()
        while far_side == here:
            far_side, shard_addr = _subnet()
        _run("ip", "-n", far_ns, "addr", "add", f"{far_side}/30", "dev", shard_link)
        _run("ip", "-n", far_ns, "link", "set", shard_link, "up")
        _run("ip", "-n", shard_ns, "addr", "add", f"{shard_addr}/30", "dev", shard_peer)
        _run("ip", "-n", shard_ns, "link", "set", shard_peer, "up")

        keys = workdir / "ssh"
        keys.mkdir()
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host_key"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client_key"))
        shutil.copy(keys / "client_key.pub", keys / "authorized_keys")
        config = keys / "sshd_config"
        config.write_text(
            f"ListenAddress {far_addr}\nHostKey {keys / 'host_key'}\n"
            f"PidFile {keys / 'sshd.pid'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            # A session whose client vanished (the link cut) ends within seconds, so its
            # daemon gets EOF and exits rather than running on unseen.
            "ClientAliveInterval 1\nClientAliveCountMax 3\nLogLevel ERROR\n")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        sshd = subprocess.Popen(["ip", "netns", "exec", far_ns, SSHD, "-D", "-e", "-f",
                                 str(config)], stdout=subprocess.DEVNULL,
                                stderr=(workdir / "sshd.log").open("wb"))
        _wait_port(far_addr, 22)
        ssh = ("ssh", "-F", "/dev/null", "-i", str(keys / "client_key"),
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-o", "LogLevel=ERROR",
               f"root@{far_addr}")
        yield Hosts(
            far=Host(far_ns, far_addr, ssh=ssh, ns_exec=("ip", "netns", "exec", far_ns)),
            shard=Host(shard_ns, shard_addr, ns_exec=("ip", "netns", "exec", shard_ns)),
            shard_address=shard_addr, link=link, shard_link=shard_link)
    finally:
        if sshd is not None:
            sshd.terminate()
            try:
                sshd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sshd.kill()
                sshd.wait()
        for ns in made:
            # Whatever still runs inside (sessions, daemons) goes with its namespace.
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                with suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", link], capture_output=True)
