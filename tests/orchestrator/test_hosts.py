"""A model on another host, through the front end: network namespaces, a real sshd.

The front end runs here; the model "far" runs on host "far", a network namespace
reached over a veth by ssh (tests/_netns.py), on one channel (PROTOCOL.md 10). "near"
is the same model on this machine ("far-batched" the same on "far" with --parallel 2,
protocol 2). Greedy chat gives the same tokens on all (all three run in the deterministic
mode, so a resumed stream's re-prefill computes what the uninterrupted decode did, and
far-batched, alone on its lane, its solo tokens; PROTOCOL.md 1 and 9.4); cutting
the link mid-generation ends the request with a clean error within the link timeout,
the model is ``unreachable`` meanwhile (503 at once), and it serves again, with the
same tokens, once the link is back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemons.native import NativeBuild
from tests._netns import Hosts, open_hosts
from tests.conftest import LucernaServer

LINK_TIMEOUT_S = 2.0
MESSAGES = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]


def request(model: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    with open_hosts(tmp_path_factory.mktemp("hosts")) as made:
        yield made


@pytest.fixture(scope="module")
def server(hosts: Hosts, native: NativeBuild, default_model: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LucernaServer]:
    workdir = tmp_path_factory.mktemp("serve")
    config = workdir / "lucerna.toml"
    config.write_text(f"""
[[hosts]]
name = "far"
launcher = {json.dumps(list(hosts.far.ssh))}
link_timeout = "{LINK_TIMEOUT_S}s"
keepalive = "250ms"

[[models]]
name = "near"
path = "{default_model}"
n_ctx = 2048
parallel = 1
threads = 1
deterministic = true

[[models]]
name = "far"
path = "{default_model}"
host = "far"
n_ctx = 2048
parallel = 1
threads = 1
deterministic = true

[[models]]
name = "far-batched"
path = "{default_model}"
host = "far"
n_ctx = 4096
parallel = 2
threads = 1
deterministic = true
""")
    srv = LucernaServer(workdir / "serve.log", "--config", str(config))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def stream(server: LucernaServer, body: dict[str, Any],
           after_chunks: tuple[int, threading.Event] | None = None) -> tuple[str, dict[str, Any]]:
    """The streamed text and the last chunk (usage, or an error); ``after_chunks=(n, e)``
    sets ``e`` after ``n`` text chunks."""
    text, last, seen = "", {}, 0
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body,
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        try:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                last = chunk
                for choice in chunk.get("choices", []):
                    piece = choice.get("delta", {}).get("content") or ""
                    text += piece
                    seen += bool(piece)
                    if after_chunks is not None and seen == after_chunks[0]:
                        after_chunks[1].set()
        except httpx.RemoteProtocolError as exc:  # the server ended the stream early
            last = {"error": {"message": f"stream broken: {exc}"}}
    return text, last


def far_state(server: LucernaServer) -> dict[str, Any]:
    return httpx.get(f"{server.base_url}/health").json()["models"]["far"]  # type: ignore[no-any-return]


def test_a_remote_daemon_gives_the_local_tokens(server: LucernaServer) -> None:
    state = far_state(server)
    assert state["state"] == "ready" and state["host"] == "far"
    near_text, near_last = stream(server, request("near", 48))
    far_text, far_last = stream(server, request("far", 48))
    assert far_text == near_text and near_text
    assert far_last["usage"] == near_last["usage"]
    # Protocol 2 (--parallel 2) over the same channel: alone on its lane, the same tokens.
    batched_text, batched_last = stream(server, request("far-batched", 48))
    assert batched_text == near_text and batched_last["usage"] == near_last["usage"]


def remote_daemon_pids(hosts: Hosts) -> list[int]:
    """The pid, on host "far", of model "far"'s daemon: far-batched's has --parallel, and
    its tokenizer daemon (a small context, no layers offloaded) is told apart by n_ctx."""
    pids = subprocess.run(["ip", "netns", "pids", hosts.far.netns], capture_output=True,
                          text=True, check=True).stdout.split()
    found = []
    for pid in pids:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if (any(arg.endswith(b"lucerna-qwen35") for arg in argv) and b"--n-ctx=2048" in argv
                and not any(arg.startswith(b"--parallel") for arg in argv)):
            found.append(int(pid))
    return found


def test_a_remote_crash_resumes_and_metrics_name_the_model(server: LucernaServer,
                                                           hosts: Hosts) -> None:
    expected, _ = stream(server, request("near", 96))
    started = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["text"], result["last"] = stream(server, request("far", 96), (4, started))

    reader = threading.Thread(target=run)
    reader.start()
    assert started.wait(60)
    restarts = far_state(server)["restarts"]
    (pid,) = remote_daemon_pids(hosts)
    os.kill(pid, signal.SIGKILL)  # on the far host: the daemon, not its launcher
    reader.join(timeout=60)
    assert not reader.is_alive()
    # Resumed on the restarted daemon (over ssh again): one unbroken stream, same text.
    assert result["text"] == expected, result
    assert far_state(server)["restarts"] == restarts + 1
    metrics = httpx.get(f"{server.base_url}/metrics").text
    assert 'lucerna_daemon_up{model="far"} 1.0' in metrics, metrics[:2000]


def test_a_cut_link_ends_the_request_cleanly_and_recovers(server: LucernaServer,
                                                          hosts: Hosts) -> None:
    expected, _ = stream(server, request("near", 48))
    started = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["text"], result["last"] = stream(server, request("far", 1500), (4, started))
        result["ended"] = time.monotonic()

    reader = threading.Thread(target=run)
    reader.start()
    try:
        assert started.wait(60), "no tokens from the far model"
        hosts.cut()
        cut_at = time.monotonic()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the request hung after the link was cut"
        # The link timeout to notice, then one start that cannot connect, and slack.
        assert result["ended"] - cut_at < 4 * LINK_TIMEOUT_S + 4
        assert "error" in result["last"], result["last"]
        assert result["text"]  # it had streamed before the cut

        deadline = time.monotonic() + 20
        while far_state(server)["state"] != "unreachable":
            assert time.monotonic() < deadline, far_state(server)
            time.sleep(0.1)
        asked = time.monotonic()
        refused = httpx.post(f"{server.base_url}/v1/chat/completions",
                             json={**request("far", 8), "stream": False}, timeout=30)
        assert refused.status_code == 503 and "unreachable" in refused.text
        assert time.monotonic() - asked < 3
        # The other model, here, is untouched.
        assert stream(server, request("near", 48))[0] == expected
    finally:
        hosts.restore()
    deadline = time.monotonic() + 30
    while far_state(server)["state"] != "ready":
        assert time.monotonic() < deadline, f"far not back: {far_state(server)}"
        time.sleep(0.2)
    assert stream(server, request("far", 48))[0] == expected
