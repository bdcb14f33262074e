"""Bad input never kills a daemon, and a daemon never outlives its welcome
(PROTOCOL.md 1, 3, 6): a fuzz run of generated lines, --max-line, unsupported commands,
EOF, parent death, SIGTERM/SIGINT, and no fd or memory leak over many cycles."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests._tiers import Depth
from tests.conftest import free_port

ONE_THREAD = "--threads=1"  # see test_snapshots.py
STREAM_COMMANDS = {b"generate", b"tokenize", b"restore", b"compress"}
COMMANDS = [
    "generate", "tokenize", "detokenize", "vocab", "stats", "cancel", "snapshot", "restore",
    "free_snapshot", "list_slots", "park", "unpark", "compress", "embed", "quit", "exit",
]  # fmt: skip
PROMPT = "ids:9707,1879,11"  # qwen3 test-model ids


def first_word(line: bytes) -> bytes:
    return line.lstrip(b" ").split(b" ", 1)[0]


def nul_outside_text(line: bytes) -> bool:
    """A value of ``line`` decodes to bytes holding a NUL and is not inline text: such a
    line is refused whatever else it holds (PROTOCOL.md 3)."""
    for word in line.rstrip(b"\r").split(b" ")[1:]:
        key, eq, value = word.partition(b"=")
        if not eq or not key or not all(c in b"abcdefghijklmnopqrstuvwxyz0123456789_" for c in key):
            value = word  # a positional
        if b"%00" in value and not value.startswith(b"text:"):
            return True
    return False


def expected_reply(line: bytes, max_line: int) -> tuple[bool, bool]:
    """(gets a reply line, gets a -1 on the stream), as PROTOCOL.md 1 and 3 say."""
    if len(line) > max_line:  # refused whole; its first word still decides the -1
        return True, first_word(line[:max_line]) in STREAM_COMMANDS
    if line.endswith(b"\r"):
        line = line[:-1]
    word = first_word(line)
    return word != b"", word in STREAM_COMMANDS


class LineFuzzer:
    """Seeded generator of hostile command lines (never a bare quit or exit)."""

    def __init__(self, seed: int, tmp: Path, max_line: int) -> None:
        self.rng = random.Random(seed)
        # The NUL cases draw from their own generator, so adding them left the lines
        # above (and the daemon states they lead through) as they were.
        self.nul_rng = random.Random(seed + 1)
        self.tmp = tmp
        self.max_line = max_line

    def number(self) -> str:
        r = self.rng
        return r.choice([
            str(r.randrange(0, 4)), str(r.randrange(-5, 70)), str(r.randrange(0, 10**6)),
            "9" * r.randrange(10, 40), "-" + "9" * r.randrange(10, 40), "1e999", "-0", "0.5",
            "nan", "inf", "0x10", "+1", "", "1,", "١٢", str(2**31), str(2**32 - 1), str(2**63),
        ])  # fmt: skip

    def ids(self) -> str:
        r = self.rng
        return r.choice([
            "ids:" + ",".join(str(r.randrange(0, 151936)) for _ in range(r.randrange(1, 6))),
            "ids:" + ",".join(self.number() for _ in range(r.randrange(0, 4))),
            "ids:", "ids:1,,2", "ids:-1", "ids:151936", str(self.tmp / "missing.bin"),
            str(self.tmp / "odd.bin"), str(self.tmp / "prompt.bin"), "ids:%", "ids:%zz",
        ])  # fmt: skip

    def text(self) -> str:
        r = self.rng
        raw = "".join(r.choice("abc xyz%=é\t<>\"'\\/") for _ in range(r.randrange(0, 30)))
        return r.choice(
            [
                "text:" + raw.replace(" ", "%20"),
                "text:%F0%9F%98%80",
                "text:%FF",
                "text:",
                str(self.tmp / "missing.txt"),
            ]
        )

    def value(self) -> str:
        r = self.rng
        choice = r.randrange(6)
        if choice == 0:
            return self.number()
        if choice == 1:
            return self.ids()[4:] if r.random() < 0.5 else self.ids()
        if choice == 2:
            return self.text()
        if choice == 3:
            return f"{self.number()}:{self.number()}"
        if choice == 4:
            return "".join(chr(r.randrange(33, 127)) for _ in range(r.randrange(0, 12)))
        return r.choice(["0", "1", "2", "%41", "%", "%G1", "a%2", "%00", "%0A"])

    def soup(self) -> str:
        """A command word, positional arguments and options, mostly wrong."""
        r = self.rng
        word = r.choice(
            [*COMMANDS, *COMMANDS, "GENERATE", "frobnicate", "gen", "generate_", "ok", "err"]
        )
        if word == "vocab":  # files it writes stay in the fuzz's own directory
            args = [r.choice(["table.msgpack", "sub/none/table.msgpack", "%2Fproc%2Fnope"])]
        elif word == "embed":  # so is the file of embeddings
            args = [self.ids(), r.choice(["emb.f32", "sub/none/emb.f32", self.value()])]
        elif word in ("generate", "restore", "compress"):
            args = ([self.number()] if word == "restore" else []) + [
                self.ids(),
                r.choice(["1", "2", "3", self.number()]),
            ]
        else:
            args = [self.value() for _ in range(r.randrange(0, 3))]
        keys = [
            "temp",
            "top_k",
            "top_p",
            "min_p",
            "rep_pen",
            "freq_pen",
            "pres_pen",
            "rep_window",
            "seed",
            "stop",
            "ignore_eos",
            "grammar",
            "snap",
            "special",
            "add_bos",
            "path",
            "lookahead",
            "chunk",
            "pool",
            "logprobs",
            "prompt_logprobs",
            "lengths",
            "pooling",
            "Temp",
            "x",
            "",
            "a-b",
            "9",
        ]
        for _ in range(r.randrange(0, 5)):
            key = r.choice(keys)
            value = self.value()
            if key == "grammar" and r.random() < 0.3:
                value = "text:" + r.choice(
                    ["root%20::=%20%22a%22", "root%20::=%20[0-9]", "root", "(((("]
                )
            if key == "prompt_logprobs" and r.random() < 0.5:
                value = r.choice(["0", "1", "2"])
            if key in ("logprobs", "lengths") and r.random() < 0.5:
                value = r.choice(["0", "1", "2", "20", "21", "-1", "1,2", "3,0"])
            if key == "pooling" and r.random() < 0.5:
                value = r.choice(["mean", "last", "cls"])
            if key == "path":
                value = r.choice(["stats.msgpack", "no/such/dir/stats.msgpack"])
            args.append(f"{key}={value}")
        if word in ("quit", "exit"):
            args.append("now")  # never a real quit
        return " ".join([word, *args])

    def valid(self) -> str:
        r = self.rng
        slot = r.randrange(0, 8)
        return r.choice([
            f"generate {PROMPT} {r.randrange(1, 4)}",
            f"generate {PROMPT} 2 snap=2:{slot} temp=0.7 seed={r.randrange(9)}",
            f"restore {slot} {PROMPT},13 2",
            f"generate {PROMPT} 2 logprobs={r.randrange(0, 21)}",
            f"restore {slot} {PROMPT},13 2 logprobs=1 temp=0.7",
            f"generate {PROMPT} {r.randrange(0, 3)} logprobs={r.randrange(0, 4)} prompt_logprobs=1",
            f"embed {PROMPT} emb.f32 lengths=1,2", "embed ids:9707 emb.f32 pooling=last",
            f"snapshot {slot}", f"free_snapshot {slot}", "list_slots", "stats", "cancel",
            "tokenize text:Hello%20world", "detokenize ids:9707,1879", "stats path=stats.msgpack",
            "vocab table.msgpack" if r.random() < 0.05 else "stats",
            "park" if r.random() < 0.02 else "list_slots",
            "unpark",
        ])  # fmt: skip

    def nul_path(self) -> str:
        """A line whose path (or other value) holds an encoded NUL: cut at the NUL, most
        of these name files that exist, or that the daemon would write (PROTOCOL.md 3)."""
        r = self.nul_rng
        slot = r.randrange(0, 8)
        ids, text, grammar = (str(self.tmp / n) for n in ("prompt.bin", "prompt.txt", "g.gbnf"))
        return r.choice([
            "vocab nulv%00.msgpack", "vocab %00", "vocab nulv%00", "stats path=nuls%00.msgpack",
            f"stats path={self.tmp / 'nuls'}%00", f"generate {ids}%00junk {r.randrange(1, 4)}",
            f"generate {ids}%00 1 temp=0.7", f"restore {slot} {ids}%00 1", f"detokenize {ids}%00x",
            f"tokenize {text}%00.bak", f"tokenize {text}%00", f"compress {ids}%00 50",
            f"generate {PROMPT} 1 grammar={grammar}%00x",
            f"generate {PROMPT} 1 json_schema={text}%00",
            f"save_slot {slot} nulv%00", f"load_slot {slot} {ids}%00", f"generate {PROMPT} 1%00",
            f"snapshot {slot}%00", f"generate {PROMPT} 1 seed=1%00 stop=%00", "park all%00",
            f"embed {PROMPT} nule%00", f"embed {ids}%00 emb.f32",
            f"generate {PROMPT} 1 logprobs=1%00",
            f"generate {PROMPT} 0 logprobs=1 prompt_logprobs=1%00",
            # inline text keeps its NUL: data for tokenize, refused where it is a C string
            "tokenize text:a%00b", f"generate text:x%00{ids} 1",
            f"generate {PROMPT} 1 grammar=text:root%20::=%20%22a%22%00junk",
            # controls: the same files without the NUL
            f"tokenize {text}", f"detokenize {ids}",
        ])  # fmt: skip

    def line(self) -> bytes:
        if self.nul_rng.random() < 0.04:
            return self.nul_path().encode()
        r = self.rng
        kind = r.random()
        if kind < 0.25:  # random bytes, invalid UTF-8 and control bytes included
            data = bytes(r.randrange(256) for _ in range(r.randrange(0, 120))).replace(b"\n", b"")
        elif kind < 0.55:
            data = self.soup().encode()
        elif kind < 0.70:
            data = self.valid().encode()
        elif kind < 0.80:  # truncated
            full = (self.valid() if r.random() < 0.5 else self.soup()).encode()
            data = full[: r.randrange(0, len(full) + 1)]
        elif kind < 0.85:  # huge numbers everywhere
            big = "9" * r.randrange(19, 400)
            data = r.choice(
                [
                    f"generate {PROMPT} {big}",
                    f"generate ids:{big} 1",
                    f"restore {big} ids:1 1",
                    f"snapshot {big}",
                    f"generate {PROMPT} 1 seed={big}",
                    f"detokenize ids:{big}",
                    f"generate {PROMPT} 1 temp=1{big}.5",
                    f"generate {PROMPT} 1 snap={big}:1",
                ]
            ).encode()
        elif kind < 0.88:  # oversized
            size = self.max_line + r.choice([1, 2, 100, 5000, 60000])
            head = r.choice([b"generate ", b"stats ", b"", b" ", b"tokenize text:"])
            data = head + bytes(r.choice(b"abc 123%") for _ in range(size - len(head)))
        elif kind < 0.93:  # blank or nearly
            data = r.choice([b"", b" ", b"     ", b"\r", b"  \r", b"\t", b" \x00 "])
        else:  # unicode and odd spacing
            data = r.choice(
                [
                    "  stats  ",
                    "stats\r",
                    "generate\tids:1 1",
                    "tokenize text:日本語",
                    "détokenize",
                    "list_slots ",
                    " cancel",
                    "tokenize text:%E6%97%A5",
                    "stats\x00",
                ]
            ).encode()
        if first_word(data.rstrip(b"\r")) in (b"quit", b"exit"):
            data += b" now"
        return data


def test_fuzz_lines_each_get_exactly_one_reply(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path, depth: Depth
) -> None:
    max_line = 4096
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x00")
    (tmp_path / "prompt.bin").write_bytes(b"\x01\x00\x00\x00\x02\x00\x00\x00")
    (tmp_path / "prompt.txt").write_bytes(b"Hello")
    (tmp_path / "g.gbnf").write_bytes(b'root ::= "a"')
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", "--slots=8",
                   f"--max-line={max_line}", ONE_THREAD, cwd=tmp_path)  # fmt: skip
    daemon.ready()
    expected_tokens, _ = daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1")
    assert daemon.proc.stdin is not None

    fuzzer = LineFuzzer(seed=20240611, tmp=tmp_path, max_line=max_line)
    n_lines = depth(quick=1_000, full=10_000)
    counts = {"replies": 0, "terminators": 0, "blank": 0, "nul": 0}
    started = time.monotonic()
    for index in range(n_lines):
        line = fuzzer.line()
        assert b"\n" not in line
        daemon.proc.stdin.write(line + b"\n")
        daemon.proc.stdin.flush()
        reply_expected, terminator_expected = expected_reply(line, max_line)
        context = f"line {index}: {line[:200]!r}"
        if terminator_expected:
            daemon.read_stream(timeout=30)  # through exactly one -1 ...
            counts["terminators"] += 1
        if reply_expected:
            reply = daemon.readline(timeout=30)
            assert reply.startswith(("ok ", "err ")), f"{context} -> {reply!r}"
            if len(line) > max_line:
                assert daemon.err(reply) == "line_too_long", context
            elif nul_outside_text(line):
                assert reply.startswith("err "), f"{context} -> {reply!r}"
                counts["nul"] += 1
            counts["replies"] += 1
        else:
            counts["blank"] += 1
        assert daemon.stream_is_empty(wait=0), f"{context}: more on the stream than one -1"
        assert daemon.proc.poll() is None, (
            f"{context} killed the daemon:\n{daemon.stderr()[-3000:]}"
        )
    elapsed = time.monotonic() - started
    # Nothing extra is pending: the next command's reply is the next line.
    assert daemon.ok(daemon.command("list_slots"), "list_slots") is not None
    daemon.command("unpark")
    tokens, reply = daemon.stream_command(f"generate {PROMPT} 8 ignore_eos=1")
    assert tokens == expected_tokens, reply
    stats = daemon.ok(daemon.command("stats"), "stats")
    print(f"fuzz: {n_lines} lines in {elapsed:.1f} s, {counts}, stats {stats}")
    assert (counts["replies"] > n_lines * 8 // 10 and counts["terminators"] > n_lines // 10
            and counts["nul"] > n_lines // 50)
    # What a NUL-truncating daemon would have written (vocab nulv%00..., stats nuls%00...,
    # embed ... nule%00).
    assert not {"nulv", "nuls", "nule"} & {p.name for p in tmp_path.iterdir()}
    assert daemon.quit() == 0


def test_max_line_discards_the_whole_line_without_buffering_it(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", ONE_THREAD)
    daemon.ready()
    assert daemon.proc.stdin is not None
    exact = b"stats" + b" " * ((1 << 20) - 5)  # exactly the default --max-line: accepted
    daemon.proc.stdin.write(exact + b"\n" + exact + b" \n")
    daemon.proc.stdin.flush()
    assert daemon.ok(daemon.readline(), "stats")
    assert daemon.err(daemon.readline()) == "line_too_long"  # one byte more
    rss_before = psutil.Process(daemon.proc.pid).memory_info().rss
    # 64 MiB in one line, written in pieces: refused once, never held in memory.
    daemon.proc.stdin.write(b"generate " + b"1" * (1 << 16))
    for _ in range(1024):
        daemon.proc.stdin.write(b"2" * (1 << 16))
    daemon.proc.stdin.write(b"\nstats\n")
    daemon.proc.stdin.flush()
    assert daemon.read_stream() == []  # a generate line owes its -1 even refused
    assert daemon.err(daemon.readline()) == "line_too_long"
    assert daemon.ok(daemon.readline(), "stats")
    growth = psutil.Process(daemon.proc.pid).memory_info().rss - rss_before
    assert growth < 16 << 20, f"RSS grew by {growth >> 20} MiB"
    # A lower limit, and a line that ends at EOF.
    daemon = spawn(
        native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", "--max-line=100", ONE_THREAD
    )
    daemon.ready()
    assert daemon.err(daemon.command("detokenize ids:" + "1," * 60 + "1")) == "line_too_long"
    assert daemon.command("detokenize ids:9707") == "ok detokenize text=Hello"
    daemon.proc.stdin.write(b"stats " + b"x" * 200)
    daemon.proc.stdin.close()
    assert daemon.err(daemon.readline()) == "line_too_long"
    assert daemon.wait() == 0


def test_unsupported_commands(spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", ONE_THREAD)
    daemon.ready()
    values, reply = daemon.stream_command(f"compress {PROMPT} 50")
    assert values == [] and daemon.err(reply) == "unsupported"
    assert daemon.err(daemon.command("frobnicate")) == "unknown_command"
    assert daemon.stream_is_empty()
    listen = f"--rpc-listen=127.0.0.1:{free_port()}"
    shard = spawn(native.binary("ds4_shard"), test_models["deepseek4"], listen, ONE_THREAD)
    shard.ready()
    for command in ("generate ids:1 1", "tokenize text:a", "restore 0 ids:1 1"):
        values, reply = shard.stream_command(command)
        assert values == [] and shard.err(reply) == "unsupported", command
    for command in ("snapshot 0", "park", "list_slots", "vocab /tmp/x", "cancel"):
        assert shard.err(shard.command(command)) == "unsupported", command
    assert shard.quit() == 0


def test_context_and_input_errors_have_distinct_codes(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path
) -> None:
    daemon = spawn(
        native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", "--slots=4", ONE_THREAD
    )
    n_ctx = int(daemon.ready()["n_ctx"])  # the engine may round it up
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x00\x00\x02")
    cases = {
        f"generate {PROMPT} {n_ctx - 2}": "context_overflow",
        "generate ids: 4": "empty_prompt",
        "restore 4 ids:1 1": "bad_slot",
        "restore 3 ids:1 1": "empty_slot",
        f"generate {tmp_path / 'missing.bin'} 4": "bad_token_file",
        f"generate {odd} 4": "bad_token_file",
        "tokenize /nonexistent/text.txt": "bad_text_file",
        "generate ids:151936 1": "bad_token",
        f"generate {PROMPT} 1 grammar=text:(": "bad_grammar",
    }
    for command, code in cases.items():
        values, reply = daemon.stream_command(command)
        assert values == [] and daemon.err(reply) == code, (command, reply)
    assert "multiple of 4" in daemon.stream_command(f"generate {odd} 4")[1]
    assert "missing.bin" in daemon.stream_command(f"generate {tmp_path / 'missing.bin'} 4")[1]
    assert daemon.quit() == 0


def test_eof_is_quit_even_mid_generation(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=256", ONE_THREAD)
    daemon.ready()
    assert daemon.proc.stdin is not None
    daemon.proc.stdin.write(f"generate {PROMPT} 20 ignore_eos=1\nstats\n".encode())
    daemon.proc.stdin.close()
    assert len(daemon.read_stream()) == 20  # what was read before EOF still runs
    daemon.ok(daemon.readline(), "generate")
    daemon.ok(daemon.readline(), "stats")
    assert daemon.wait() == 0


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_generation_cancels_and_exits_0(
    signo: int, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=8192", ONE_THREAD)
    daemon.ready()
    daemon.send(f"generate {PROMPT} 8000 ignore_eos=1")
    daemon.send("stats")  # queued behind it: dropped, the process is going away
    assert daemon.read_value() >= 0  # running
    daemon.proc.send_signal(signo)
    rest = daemon.read_stream()  # its -1 is written ...
    fields = daemon.ok(daemon.readline(), "generate")  # ... and its reply
    assert fields["finish"] == "cancelled" and int(fields["n_gen"]) == len(rest) + 1 < 8000
    assert daemon.wait(timeout=10) == 0
    assert daemon.proc.stdout is not None and daemon.proc.stdout.read() == b""


def test_sigterm_when_idle_exits_0(spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", ONE_THREAD)
    daemon.ready()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=10) == 0


def test_the_daemon_never_outlives_its_parent(native: Any, test_models: dict[str, Path]) -> None:
    """An intermediate parent starts the daemon and is SIGKILLed. The daemon's stdin
    stays open (we hold it), so only PR_SET_PDEATHSIG can tell it the parent is gone."""
    launcher = textwrap.dedent(
        """
        import subprocess, sys, time
        child = subprocess.Popen(sys.argv[1:])  # stdin/stdout inherited from us
        print(child.pid, file=sys.stderr, flush=True)
        time.sleep(600)
        """
    )
    argv = [str(native.binary("qwen35")), str(test_models["qwen3"]), "--n-ctx=64", ONE_THREAD]
    stdin_read, stdin_write = os.pipe()
    parent = subprocess.Popen(
        [sys.executable, "-c", launcher, *argv],
        stdin=stdin_read, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(stdin_read)
    try:
        assert parent.stderr is not None and parent.stdout is not None
        daemon_pid = int(parent.stderr.readline())
        assert parent.stdout.readline().startswith(b"ready ")
        daemon = psutil.Process(daemon_pid)
        assert daemon.ppid() == parent.pid
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if daemon.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            daemon.kill()
            pytest.fail("the daemon outlived its parent by 10 s")
    finally:
        os.close(stdin_write)
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_no_fd_or_memory_leak_over_its_cycles(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path, depth: Depth
) -> None:
    daemon = spawn(
        native.binary("qwen35"), test_models["qwen3"], "--n-ctx=128", "--chunk=4", ONE_THREAD
    )
    daemon.ready()
    process = psutil.Process(daemon.proc.pid)
    prompt_file = tmp_path / "prompt.bin"
    prompt_file.write_bytes(
        b"".join(i.to_bytes(4, "little") for i in (9707, 1879, 11, 419, 374, 264))
    )
    long_prompt = PROMPT + ",419,374,264"
    assert daemon.proc.stdin is not None

    for slot in range(3):  # a cancelled generate may stop before its snap: start full
        daemon.stream_command(f"generate {long_prompt} 1 snap=4:{slot}")

    # every tenth cycle: it costs a vocabulary pass per token
    grammar = " grammar=text:root%20::=%20[a-z]+"

    def cycle(i: int) -> None:
        # generate + cancel, restore (from a file, under a grammar), snapshot, free, an error
        batch = (
            f"generate {long_prompt} 100 ignore_eos=1 snap=4:{i % 3}\ncancel\n"
            f"restore {i % 3} {prompt_file} 2{grammar if i % 10 == 0 else ''}\n"
            f"snapshot 5\nfree_snapshot 5\ngenerate {tmp_path / 'missing.bin'} 1\nstats\n"
        )
        daemon.proc.stdin.write(batch.encode())
        daemon.proc.stdin.flush()
        daemon.read_stream()
        assert daemon.ok(daemon.readline(), "generate")
        assert daemon.readline().startswith("ok cancel ")
        daemon.read_stream()
        assert daemon.ok(daemon.readline(), "restore")
        assert daemon.ok(daemon.readline(), "snapshot")
        assert daemon.ok(daemon.readline(), "free_snapshot")
        daemon.read_stream()
        assert daemon.err(daemon.readline()) == "bad_token_file"
        assert daemon.ok(daemon.readline(), "stats")

    # Warm-up: allocator pools, the engine's graph caches (flat after ~300 cycles; the fast
    # tier's 50 cycles catch a leak of an fd, or of 320 kB or more a cycle).
    for i in range(depth(quick=20, full=300)):
        cycle(i)
    fds_before = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
    rss_before = process.memory_info().rss
    started = time.monotonic()
    cycles = depth(quick=50, full=1000)
    for i in range(cycles):
        cycle(i)
    elapsed = time.monotonic() - started
    fds_after = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
    rss_after = process.memory_info().rss
    print(f"leak: {cycles} cycles in {elapsed:.1f} s, rss {rss_before >> 10} -> "
          f"{rss_after >> 10} kB, fds {fds_before} -> {fds_after}")
    assert fds_after == fds_before
    assert rss_after - rss_before < 16 << 20
    assert daemon.quit() == 0
