"""Process lifecycle and the command channel, against a stand-in daemon written in Python.

The stand-in speaks PROTOCOL.md through protocol/ (``parse_command``, ``ReadyInfo.encode``),
so these tests need no model and no native build. The model path tells it how to behave:
``plain`` serves ``tokenize`` (one id per character) and ``quit``; ``stubborn`` never
quits on request; ``refuses`` answers its start with ``err wrong_arch``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import trio

import daemons.process
from daemons.channel import CommandChannel
from daemons.errors import DaemonDiedError, DaemonReplyError, DaemonStartError
from daemons.process import describe_exit, open_daemon_process
from daemons.roles import DaemonLaunch, role_named
from protocol import InlineText, Stats, Tokenize, Vocab

STAND_IN = """\
import os, sys, time
from protocol import (PROTOCOL_VERSION, STREAM_END, CommandError, ErrReply, OkReply,
                      ReadyInfo, encode_token_bytes, parse_command)

model = sys.argv[1]
stream = os.fdopen(int(sys.argv[2].removeprefix("--stream-fd=")), "wb", buffering=0)
if model == "refuses":
    sys.stdout.write(ErrReply("wrong_arch", "not a model of this role").encode().decode())
    sys.exit(1)
ready = ReadyInfo(protocol=PROTOCOL_VERSION, role="qwen35", arch="stand-in", n_vocab=256,
                  n_ctx=64, n_ctx_train=64, bos=-1, eos=-1, add_bos=False, backend="cpu",
                  engine="none", version="0", capabilities=frozenset({"tokenize", "stats", "quit"}))
sys.stdout.write(ready.encode().decode())
sys.stdout.flush()
for line in sys.stdin:
    try:
        command = parse_command(line)
    except CommandError as exc:
        reply = ErrReply(exc.code, "refused")
    else:
        if command.name == "quit":
            if model == "stubborn":
                continue
            reply = OkReply("quit")
        elif command.name == "tokenize":
            ids = [ord(c) for c in command.text.text]
            stream.write(encode_token_bytes([*ids, STREAM_END]))
            reply = OkReply("tokenize", {"n": str(len(ids))})
        else:
            reply = ErrReply("bad_args", "the stand-in serves tokenize")
    sys.stdout.write(reply.encode().decode())
    sys.stdout.flush()
    if command.name == "quit":
        sys.exit(0)
time.sleep(60)  # stdin closed: a stubborn daemon still does not go
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    script = tmp_path / "stand-in-daemon"
    script.write_text(f"#!{sys.executable}\n{STAND_IN}")
    script.chmod(0o755)
    return script


def launch(executable: Path, behaviour: str) -> DaemonLaunch:
    return DaemonLaunch(role=role_named("qwen35"), executable=executable, model=Path(behaviour))


def test_describe_exit() -> None:
    assert describe_exit(None) == "is still running"
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"


async def test_commands_and_a_polite_quit(stand_in: Path) -> None:
    async with open_daemon_process(launch(stand_in, "plain")) as daemon:
        assert daemon.ready is not None and daemon.ready.arch == "stand-in"
        channel = CommandChannel(daemon)
        ids, reply = await channel.run_stream(Tokenize(InlineText("hi")))
        assert ids == [ord("h"), ord("i")] and reply.int_field("n") == 2
        with pytest.raises(DaemonReplyError) as refused:
            await channel.run(Stats())
        assert refused.value.code == "bad_args" and refused.value.pid == daemon.pid
        # Not in the ready line's capabilities: refused here, never sent.
        with pytest.raises(DaemonReplyError, match="not in the capabilities") as unserved:
            await channel.run(Vocab("/nonexistent"))
        assert unserved.value.code == "unsupported"
        assert (await channel.run_stream(Tokenize(InlineText("ok"))))[0] == [ord("o"), ord("k")]
    assert daemon.returncode == 0 and daemon.intentional_exit and daemon.exited.is_set()


async def test_a_daemon_that_will_not_quit_is_terminated(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemons.process, "_QUIT_GRACE_S", 0.5)
    with trio.fail_after(20):
        async with open_daemon_process(launch(stand_in, "stubborn")) as daemon:
            pass
    assert daemon.returncode == -signal.SIGTERM and daemon.intentional_exit


async def test_death_is_noticed_and_every_read_raises(stand_in: Path) -> None:
    with trio.fail_after(20):
        async with open_daemon_process(launch(stand_in, "plain")) as daemon:
            os.kill(daemon.pid, signal.SIGKILL)
            await daemon.exited.wait()
            assert not daemon.intentional_exit
            with pytest.raises(DaemonDiedError, match="SIGKILL") as died:
                await daemon.receive_line()
            assert died.value.returncode == -signal.SIGKILL
            with pytest.raises(DaemonDiedError):
                await daemon.send(b"stats\n")


async def test_a_refusal_at_start_is_a_start_error(stand_in: Path) -> None:
    with pytest.raises(DaemonStartError, match="wrong_arch"):
        async with open_daemon_process(launch(stand_in, "refuses")):
            pass
