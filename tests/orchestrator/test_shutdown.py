"""Graceful shutdown on SIGTERM: refuse new connections, drain in-flight requests up to
``--shutdown-timeout``, cut what runs longer, stop the daemons, exit 0."""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from daemons.native import NativeBuild
from tests.conftest import LucernaServer

MESSAGES = [{"role": "user", "content": "Tell me a long story."}]


@dataclass
class StreamWatch:
    """A streaming request read in a thread, with what happened and when."""

    server: LucernaServer
    max_tokens: int
    started: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False  # saw data: [DONE]
    error: BaseException | None = None
    ended_at: float = 0.0

    def run(self) -> None:
        try:
            with httpx.stream("POST", f"{self.server.base_url}/v1/chat/completions",
                              timeout=120, json={
                                  "model": "qwen3", "messages": MESSAGES, "temperature": 0,
                                  "max_tokens": self.max_tokens, "stream": True,
                                  "stream_options": {"include_usage": True}}) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        self.done = True
                    elif line.startswith("data: "):
                        self.chunks.append(json.loads(line[6:]))
                        if len(self.chunks) == 4:  # the role chunk, then three of text
                            self.started.set()
        except BaseException as exc:  # the cut stream ends in a protocol error
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.started.set()
            self.finished.set()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        assert self.started.wait(60), "the stream never started"
        assert not self.finished.is_set(), f"the stream ended early: {self.error}"
        return thread


def daemon_pid(server: LucernaServer) -> int:
    return int(httpx.get(f"{server.base_url}/health").json()["models"]["qwen3"]["pid"])


def assert_gone(pid: int) -> None:
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    # Not our child, so never a zombie of ours; anything left is a leak.
    raise AssertionError(f"daemon pid {pid} outlived the server: {process.status()}")


def start_server(test_models: dict[str, Path], tmp_path: Path, timeout: float) -> LucernaServer:
    # The output cap lifted to the context: a long stream must really be long (the
    # default cap, a quarter of the context, is well under a second of this model).
    server = LucernaServer(tmp_path / "serve.log", "--model", str(test_models["qwen3"]),
                           "--n-ctx", "4096", "--max-output-tokens", "4000",
                           "--shutdown-timeout", str(timeout))
    server.wait_healthy()
    return server


def test_sigterm_drains_a_stream_and_refuses_new_connections(
    native: NativeBuild, test_models: dict[str, Path], tmp_path: Path,
) -> None:
    server = start_server(test_models, tmp_path, timeout=30)
    try:
        pid = daemon_pid(server)
        watch = StreamWatch(server, max_tokens=64)
        thread = watch.start()
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # New connections are refused while the stream is still being served.
        while True:
            try:
                httpx.get(f"{server.base_url}/health", timeout=2)
            except httpx.ConnectError:
                refused_at = time.monotonic()
                break
            assert time.monotonic() - signalled < 5, "still accepting connections"
            time.sleep(0.02)
        thread.join(60)
        assert watch.error is None, watch.error
        assert refused_at < watch.ended_at, "the stream ended before the listener closed"
        # The in-flight stream ended as usual: finish reason, usage, [DONE].
        assert watch.done
        finishes = [c["choices"][0]["finish_reason"] for c in watch.chunks if c["choices"]]
        assert finishes[-1] in ("length", "stop")
        usage = watch.chunks[-1]["usage"]
        if finishes[-1] == "length":
            assert usage["completion_tokens"] == 64
        assert server.process.wait(timeout=30) == 0
        assert_gone(pid)
        log = server.log()
        assert "received SIGTERM" in log
        assert "exited with status 0" in log  # the daemon quit when asked
    finally:
        server.stop()


def test_a_stream_longer_than_the_timeout_is_cut(
    native: NativeBuild, test_models: dict[str, Path], tmp_path: Path,
) -> None:
    server = start_server(test_models, tmp_path, timeout=1.0)
    try:
        pid = daemon_pid(server)
        watch = StreamWatch(server, max_tokens=3900)  # ~5 s at this model's 800 tok/s
        thread = watch.start()
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        thread.join(30)
        assert watch.finished.is_set()
        assert not watch.done  # cut: no [DONE], no final chunk
        assert all(c["choices"][0]["finish_reason"] is None for c in watch.chunks)
        assert watch.ended_at - signalled < 1.0 + 4.0
        assert server.process.wait(timeout=30) == 0
        assert time.monotonic() - signalled < 1.0 + 15.0
        assert_gone(pid)
    finally:
        server.stop()

