"""One daemon over its stdin protocol, blocking: for scripts.

For the GPU scripts in bin/ (``gpu-dflash-bench``, ``gpu-h200-bench``,
``greedy-divergence``), which run on bare benchmark machines: no trio, only the
standard library and protocol/ (whose one dependency, msgpack, Lucerna installs). The
orchestrator drives daemons with the Trio client in ``daemons.client``; this is not a
second client for it.

Scripts write commands as the text a person would type (``"park all"``,
``"generate ids:1,2,3 4 ignore_eos=1"``). ``protocol.parse_command`` reads each line the
way a daemon does, so a mistyped line is refused here, before it is sent, with the
``err`` code the daemon would answer (``protocol.CommandError``); the typed command then
says whether its result comes on the stream fd, and its canonical encoding is what goes
on the wire. Replies are read with ``protocol.parse_reply_line`` and the stream with
``protocol.TokenStreamReader``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol, TypeVar

from protocol import (
    Command,
    ErrReply,
    Generate,
    InlineIds,
    LogprobStreamReader,
    OkReply,
    ProtocolError,
    Quit,
    TokenLogprobs,
    TokenStreamReader,
    parse_command,
    parse_reply_line,
    parse_startup_line,
)

__all__ = ["BlockingDaemon"]

_Item = TypeVar("_Item")


class _StreamReader(Protocol[_Item]):
    """What ``TokenStreamReader`` and ``LogprobStreamReader`` have in common."""

    @property
    def finished(self) -> bool: ...

    def feed(self, data: bytes) -> list[_Item]: ...

_READ_SIZE = 65536


class BlockingDaemon:
    """One daemon over its stdin protocol (PROTOCOL.md 7): lines, int32 stream, -1.

    A daemon that dies under a command ends the script: ``SystemExit`` with its command line.
    """

    def __init__(self, binary: Path, model: Path, *flags: str) -> None:
        read_fd, write_fd = os.pipe()
        self.argv = [str(binary), str(model), f"--stream-fd={write_fd}", *flags]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, pass_fds=(write_fd,), text=True)
        os.close(write_fd)  # the child holds the only write end, so its death is EOF here
        self.stream = os.fdopen(read_fd, "rb")
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        try:
            ready = parse_startup_line(line)
        except ProtocolError:
            ready = None  # died before it said anything, or said something else
        if ready is None or isinstance(ready, ErrReply):
            err = self.proc.stderr.read()[-3000:] if self.proc.stderr else ""
            raise SystemExit(f"daemon did not start: {line.strip()!r}\n"
                             f"{' '.join(self.argv)}\n{err}")
        self.ready: dict[str, str] = ready.fields
        """Every ``key=value`` of the ready line, decoded."""

    def command(self, line: Command | str) -> str:
        """Send one command (a line to parse, or a typed one); its reply line. A stream
        command's values are read and dropped."""
        return self._exchange(line)[1]

    def stream_command(self, line: Command | str) -> tuple[list[int], str]:
        """Send one stream command (PROTOCOL.md 5): its values up to the ``-1`` every
        stream command writes, success or error, then its reply line."""
        return self._exchange(line)

    def generate(self, prompt: list[int], n_gen: int) -> tuple[list[int], dict[str, str]]:
        """``generate`` of ``n_gen`` tokens, end-of-generation ignored: the tokens and the
        reply's fields."""
        tokens, line = self._exchange(Generate(InlineIds(tuple(prompt)), n_gen, ignore_eos=True))
        reply = parse_reply_line(line)
        if not isinstance(reply, OkReply) or reply.command != "generate":
            raise SystemExit(f"generate failed: {line}")
        return tokens, reply.fields

    def generate_logprobs(self, prompt: list[int], n_gen: int,
                          top_k: int) -> tuple[list[TokenLogprobs], dict[str, str]]:
        """Greedy ``generate ... logprobs=top_k``, end-of-generation ignored: one record
        per token (its id, log-probability and the ``top_k`` most likely) and the reply's
        fields."""
        self._write(Generate(InlineIds(tuple(prompt)), n_gen, ignore_eos=True, logprobs=top_k))
        records: list[TokenLogprobs] = self._read_stream(LogprobStreamReader(top_k))
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        reply = parse_reply_line(line)
        if not isinstance(reply, OkReply) or reply.command != "generate":
            raise SystemExit(f"generate failed: {line}")
        return records, reply.fields

    def close(self) -> None:
        try:
            self._write(Quit())
            self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.stream.close()

    def _exchange(self, command: Command | str) -> tuple[list[int], str]:
        """Send a command; its stream values (none unless a stream command) and reply line.

        Raises:
            protocol.CommandError: a line the daemon would refuse whatever its state.
        """
        if isinstance(command, str):
            command = parse_command(command)
        self._write(command)
        values: list[int] = self._read_stream(TokenStreamReader()) if command.is_stream else []
        assert self.proc.stdout is not None
        return values, self.proc.stdout.readline().strip()

    def _read_stream(self, reader: _StreamReader[_Item]) -> list[_Item]:
        """Everything one command writes on the stream fd, up to its end."""
        items: list[_Item] = []
        while not reader.finished:
            data = self.stream.read1(_READ_SIZE)
            if not data:
                raise SystemExit(f"the daemon died: {' '.join(self.argv)}")
            items.extend(reader.feed(data))
        return items

    def _write(self, command: Command) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode().decode("utf-8"))
        self.proc.stdin.flush()
