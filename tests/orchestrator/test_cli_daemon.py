"""``lucerna daemon``: a person scripts a daemon by hand; stream values show on stderr."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from daemons.paths import repo_root
from orchestrator.cli import echo_stream
from protocol import OkReply, encode_token_bytes, parse_reply_line, parse_startup_line

COMMANDS = [
    "tokenize text:Hello%20world",
    "generate ids:9707,1879 4 ignore_eos=1",
    "generate ids: 4",
    "stats",
    "quit",
]


def test_daemon_command_passes_lines_through_and_shows_the_stream(
    native: object, test_models: dict[str, Path]
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "daemon",
            "qwen35",
            str(test_models["qwen35"]),
            "--n-ctx=512",
        ],
        input="\n".join(COMMANDS) + "\n",
        capture_output=True,
        text=True,
        cwd=repo_root(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ready, *replies = result.stdout.splitlines()
    parse_startup_line(ready)
    assert [line.split(" ")[:2] for line in replies] == [
        ["ok", "tokenize"],
        ["ok", "generate"],
        ["err", "empty_prompt"],
        ["ok", "stats"],
        ["ok", "quit"],
    ]
    streams = [line for line in result.stderr.splitlines() if line.startswith("S:")]
    assert streams[0] == "S: 9707 1879 -1"  # the real Qwen tokenizer
    generated = streams[1].split()
    assert generated[0] == "S:" and generated[-1] == "-1" and len(generated) == 6
    assert streams[2:] == ["S: -1"]  # a refused stream command still ends its stream
    reply = parse_reply_line(replies[1])
    assert isinstance(reply, OkReply) and reply.int_field("n_gen") == 4


def test_echo_stream_copes_with_short_reads_and_several_streams() -> None:
    read_fd, write_fd = os.pipe()
    data = encode_token_bytes([1, 2, -1, -1, 300000, -1, 7])
    for i in range(0, len(data), 3):  # values split across writes
        os.write(write_fd, data[i : i + 3])
    os.close(write_fd)
    out = io.StringIO()
    echo_stream(read_fd, out)
    os.close(read_fd)
    assert out.getvalue() == "S: 1 2 -1\nS: -1\nS: 300000 -1\nS: 7\n"
