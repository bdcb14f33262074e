"""One daemon over its stdin protocol, blocking and stdlib only.

For the GPU scripts in bin/ (``gpu-dflash-bench``, ``gpu-h200-bench``), which run on
bare benchmark machines under whatever Python is there. The orchestrator drives
daemons with the Trio client in ``daemons.client``; this is not a second client for it.
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

__all__ = ["BlockingDaemon"]


class BlockingDaemon:
    """One daemon over its stdin protocol (PROTOCOL.md 7): lines, int32 stream, -1."""

    def __init__(self, binary: Path, model: Path, *flags: str) -> None:
        read_fd, write_fd = os.pipe()
        self.argv = [str(binary), str(model), f"--stream-fd={write_fd}", *flags]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, pass_fds=(write_fd,), text=True)
        os.close(write_fd)
        self.stream = os.fdopen(read_fd, "rb")
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("ready "):
            err = self.proc.stderr.read()[-3000:] if self.proc.stderr else ""
            raise SystemExit(f"daemon did not start: {line!r}\n{' '.join(self.argv)}\n{err}")
        self.ready = dict(word.split("=", 1) for word in line.split()[1:])

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stream_command(self, line: str) -> tuple[list[int], str]:
        """A stream command (PROTOCOL.md 5): its values up to the ``-1`` every stream
        command writes, success or error, then its reply line."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        values: list[int] = []
        while True:
            raw = self.stream.read(4)
            if len(raw) < 4:
                raise SystemExit(f"the daemon died: {' '.join(self.argv)}")
            (value,) = struct.unpack("<i", raw)
            if value == -1:
                break
            values.append(value)
        return values, self.proc.stdout.readline().strip()

    def generate(self, prompt: list[int], n_gen: int) -> tuple[list[int], dict[str, str]]:
        tokens, reply = self.stream_command(
            f"generate ids:{','.join(map(str, prompt))} {n_gen} ignore_eos=1")
        if not reply.startswith("ok generate"):
            raise SystemExit(f"generate failed: {reply}")
        return tokens, dict(word.split("=", 1) for word in reply.split()[2:])

    def close(self) -> None:
        try:
            self.command("quit")
            self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.stream.close()
