"""systemd integration: sd_notify over a real datagram socket, watchdog, socket activation.

The end-to-end tests play systemd's part themselves: they bind the notification
socket (or the listening socket), start a real ``lucerna serve`` with the variables
systemd would set, and watch what arrives.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.systemd import SystemdEnvironment, sd_notify
from tests.conftest import LucernaServer, free_port

SYSTEMD_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                     "LISTEN_PID", "LISTEN_FDNAMES")


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)
        yield path, sock


def receive(sock: socket.socket) -> list[str]:
    try:
        return sock.recv(4096).decode().split("\n")
    except TimeoutError:
        return []


def test_sd_notify_sends_one_datagram(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    assert sd_notify(path, "READY=1", "STATUS=serving")
    assert receive(sock) == ["READY=1", "STATUS=serving"]


def test_sd_notify_reaches_the_abstract_namespace() -> None:
    name = f"lucerna-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        assert sd_notify("@" + name, "WATCHDOG=1")
        assert receive(sock) == ["WATCHDOG=1"]


def test_sd_notify_never_raises(tmp_path: Path) -> None:
    assert not sd_notify(None, "READY=1")
    assert not sd_notify(str(tmp_path / "nobody-listens"), "READY=1")


def test_take_reads_and_removes_the_variables() -> None:
    environ = {"NOTIFY_SOCKET": "@sd", "WATCHDOG_USEC": "20000000", "LISTEN_FDS": "2",
               "LISTEN_PID": "42", "LISTEN_FDNAMES": "a:b", "PATH": "/bin"}
    taken = SystemdEnvironment.take(environ, pid=42)
    assert taken == SystemdEnvironment("@sd", 10.0, (3, 4))
    assert environ == {"PATH": "/bin"}  # the daemons we spawn inherit none of it


def test_take_ignores_what_is_meant_for_another_process() -> None:
    environ = {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "7", "LISTEN_FDS": "1",
               "LISTEN_PID": "7"}
    assert SystemdEnvironment.take(environ, pid=8) == SystemdEnvironment()
    assert environ == {}
    assert SystemdEnvironment.take({"WATCHDOG_USEC": "nonsense"}, pid=8) == SystemdEnvironment()


def daemon_environ(base_url: str) -> dict[str, str]:
    models = httpx.get(f"{base_url}/health").json()["models"]
    (state,) = models.values()
    return psutil.Process(state["pid"]).environ()  # type: ignore[no-any-return]


def test_ready_watchdog_and_stopping_from_a_real_server(
    native: NativeBuild, test_models: dict[str, Path], notify_socket: tuple[str, socket.socket],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, sock = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # a ping every 0.2 s
    server = LucernaServer(tmp_path / "serve.log", "--model", str(test_models["qwen3"]))
    try:
        received: list[str] = []
        deadline = time.monotonic() + 120
        while "READY=1" not in received:
            assert time.monotonic() < deadline, f"no READY=1: {received}\n{server.log()}"
            assert server.process.poll() is None, server.log()
            lines = receive(sock)
            if "READY=1" in lines:
                # READY=1 only once the listener answers and every daemon is ready.
                assert httpx.get(f"{server.base_url}/health").status_code == 200
            received += lines
        status = [line for line in received if line.startswith("STATUS=")]
        assert status[-1].startswith("STATUS=serving qwen3 on http://127.0.0.1:")

        pings_from = time.monotonic()
        pings = 0
        while time.monotonic() - pings_from < 1.2:
            pings += receive(sock).count("WATCHDOG=1")
        assert pings >= 4

        assert not set(SYSTEMD_VARIABLES) & set(daemon_environ(server.base_url))

        server.process.send_signal(signal.SIGTERM)
        after: list[str] = []
        deadline = time.monotonic() + 30
        while "STOPPING=1" not in after:
            assert time.monotonic() < deadline, f"no STOPPING=1: {after}"
            after += receive(sock)
        assert "READY=1" not in after
        assert server.process.wait(timeout=30) == 0
    finally:
        server.stop()


def test_socket_activation_serves_the_inherited_socket(
    native: NativeBuild, test_models: dict[str, Path], tmp_path: Path,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        fd = listener.fileno()
        unused = free_port()
        # systemd passes its sockets from fd 3 on and sets LISTEN_PID to the service's
        # pid; this wrapper does the same, then execs the server (which keeps its pid).
        wrapper = ("import os, sys\n"
                   "fd = int(sys.argv[1])\n"
                   "if fd != 3:\n"
                   "    os.dup2(fd, 3)\n"
                   "    os.close(fd)\n"
                   "os.environ['LISTEN_PID'] = str(os.getpid())\n"
                   "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n")
        command = [sys.executable, "-c", wrapper, str(fd), "-m", "orchestrator.cli", "serve",
                   "--model", str(test_models["qwen3"]), "--port", str(unused)]
        environ = {**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "lucerna.socket",
                   "PYTHONUNBUFFERED": "1"}
        log_path = tmp_path / "serve.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, pass_fds=(fd,), env=environ, cwd=repo_root(),
                                       stdout=log, stderr=subprocess.STDOUT)
        base_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                try:
                    if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            response = httpx.post(f"{base_url}/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            assert response.status_code == 200
            with pytest.raises(httpx.ConnectError):  # --port is not used
                httpx.get(f"http://127.0.0.1:{unused}/health")
            assert not set(SYSTEMD_VARIABLES) & set(daemon_environ(base_url))
            assert "(sockets from systemd)" in log_path.read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
        assert code == 0, log_path.read_text()
