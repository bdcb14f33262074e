"""Drive the real native daemons over raw pipes, without the Python client.

``Daemon`` speaks PROTOCOL.md by hand: lines on stdin/stdout, int32 LE values on a
pipe passed as ``--stream-fd``. Every read has a timeout so a protocol bug fails a
test instead of hanging the suite.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from daemons.native import NativeBuild
from daemons.testmodels import TEST_MODEL_SEED

DEFAULT_TIMEOUT = 60.0


class ProtocolTimeout(AssertionError):
    pass


class Daemon:
    """One daemon process; ``stream=False`` starts it without ``--stream-fd``."""

    def __init__(
        self,
        binary: Path,
        model: Path | str,
        *args: str,
        stream: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        # Closed in close(): it outlives this constructor, so no with-block.
        self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115
        argv = [str(binary), str(model), *args]
        pass_fds: tuple[int, ...] = ()
        self.stream_fd: int | None = None
        write_end: int | None = None
        if stream:
            self.stream_fd, write_end = os.pipe()
            argv.append(f"--stream-fd={write_end}")
            pass_fds = (write_end,)
        self.argv = argv
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            pass_fds=pass_fds,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        if write_end is not None:
            os.close(write_end)  # only the daemon holds the write end: EOF means it died
        assert self.proc.stdout is not None
        self._stdout_fd = self.proc.stdout.fileno()
        self._stdout_buf = b""
        self._stream_buf = b""
        self.stdout_lines: list[str] = []

    # -- raw reads with deadlines ---------------------------------------------------
    def _wait_readable(self, fd: int, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise ProtocolTimeout(f"no data from {self.argv[0]} within the timeout")

    def readline(self, timeout: float = DEFAULT_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._stdout_buf:
            self._wait_readable(self._stdout_fd, deadline)
            chunk = os.read(self._stdout_fd, 65536)
            if not chunk:
                raise EOFError(f"{self.argv[0]} closed stdout; stderr:\n{self.stderr()[-2000:]}")
            self._stdout_buf += chunk
        line, self._stdout_buf = self._stdout_buf.split(b"\n", 1)
        text = line.decode()
        self.stdout_lines.append(text)
        return text

    def read_value(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        assert self.stream_fd is not None, "daemon was started without a stream fd"
        deadline = time.monotonic() + timeout
        while len(self._stream_buf) < 4:  # pipes return short reads: collect exactly 4 bytes
            self._wait_readable(self.stream_fd, deadline)
            chunk = os.read(self.stream_fd, 65536)
            if not chunk:
                raise EOFError("stream fd closed")
            self._stream_buf += chunk
        (value,) = struct.unpack("<i", self._stream_buf[:4])
        self._stream_buf = self._stream_buf[4:]
        return int(value)

    def read_stream(self, timeout: float = DEFAULT_TIMEOUT) -> list[int]:
        """Values up to (not including) the -1 terminator."""
        values = []
        while (value := self.read_value(timeout)) != -1:
            values.append(value)
        return values

    def stream_is_empty(self, wait: float = 0.2) -> bool:
        """True if nothing more than what was consumed is on the stream."""
        assert self.stream_fd is not None
        if self._stream_buf:
            return False
        return not select.select([self.stream_fd], [], [], wait)[0]

    # -- reply parsing (static, so tests need no import from this conftest) -------------
    @staticmethod
    def ok(line: str, command: str) -> dict[str, str]:
        """The key=value fields of ``ok <command> ...``; fails on anything else."""
        prefix = f"ok {command}"
        assert line == prefix or line.startswith(prefix + " "), f"expected {prefix!r}, got {line!r}"
        return parse_kv(line.split(" ")[2:])

    @staticmethod
    def err(line: str) -> str:
        """The code of an ``err <code> <detail>`` line; fails on anything else."""
        assert line.startswith("err "), f"expected an err line, got {line!r}"
        return line.split(" ")[1]

    # -- protocol ---------------------------------------------------------------------
    def ready(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, str]:
        line = self.readline(timeout)
        assert line.startswith("ready "), (
            f"expected a ready line, got {line!r}; stderr:\n{self.stderr()}"
        )
        return parse_kv(line.split(" ")[1:])

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def command(self, line: str, timeout: float = DEFAULT_TIMEOUT) -> str:
        self.send(line)
        return self.readline(timeout)

    def stream_command(self, line: str, timeout: float = DEFAULT_TIMEOUT) -> tuple[list[int], str]:
        self.send(line)
        values = self.read_stream(timeout)
        return values, self.readline(timeout)

    def quit(self, timeout: float = 30.0) -> int:
        assert self.command("quit") == "ok quit"
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        if self.stream_fd is not None:
            os.close(self.stream_fd)
            self.stream_fd = None
        self.stderr_file.close()


def parse_kv(words: Sequence[str]) -> dict[str, str]:
    out = {}
    for word in words:
        key, _, value = word.partition("=")
        out[key] = value
    return out


def _tracked_daemons() -> Iterator[type[Daemon]]:
    started: list[Daemon] = []

    class TrackedDaemon(Daemon):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    yield TrackedDaemon
    for daemon in started:
        daemon.close()


@pytest.fixture
def spawn() -> Iterator[type[Daemon]]:
    """A Daemon factory whose processes are all killed and reaped after the test."""
    yield from _tracked_daemons()


@pytest.fixture(scope="module")
def spawn_for_module() -> Iterator[type[Daemon]]:
    """Like ``spawn``, for a daemon that a whole test module shares."""
    yield from _tracked_daemons()


@pytest.fixture(scope="module")
def gemma(native: NativeBuild, default_model: Path) -> Iterator[Daemon]:
    """One qwen35-role daemon on the default model, shared by a test module.

    ``native``, ``default_model`` and ``test_models`` are the session fixtures of
    tests/conftest.py (the real build, the real default model, the test GGUFs).
    """
    # One engine thread: on a busy 2-core box ggml's spinning thread barriers make two
    # threads tens of times slower than one (measured), and the tokens do not change.
    daemon = Daemon(native.binary("qwen35"), default_model, "--threads=1")
    daemon.ready()
    yield daemon
    daemon.close()


def write_on_request_model(native: NativeBuild, out: Path, name: str) -> Path:
    """A test model that lucerna-mkmodels writes only when asked (``--only``), with the
    seed of the others."""
    subprocess.run(
        [str(native.mkmodels), "--out", str(out), "--seed", str(TEST_MODEL_SEED), "--only", name],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out / f"{name}.gguf"


@pytest.fixture(scope="session")
def qwen35moe_model(native: NativeBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The qwen35 test model's MoE sibling (routed experts and a shared one)."""
    return write_on_request_model(native, tmp_path_factory.mktemp("qwen35moe"), "qwen35moe")
