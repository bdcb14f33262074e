"""Several sequences in one daemon (``--parallel N``, protocol 2, PROTOCOL.md 9), raw.

What equality holds was measured on this CPU build (issue 21 item 3), with logprobs:

- A sequence run alone on any lane of a ``--parallel N`` daemon gives bit for bit the
  tokens and logprobs of a ``--parallel 1`` daemon, greedy, seeded sampling and grammar
  alike, on every test model and gemma3 (deviation 0.0). With ``--kv-unified=off`` that
  holds by construction (each lane its own KV stream and recurrent state). With the
  daemon's defaults (one shared KV pool, flash attention ``auto``) it was measured to
  hold too, the other lanes holding their cells (PROTOCOL.md 9.4 gives the likely
  reason); those tests compare exactly with the defaults, which is the setting they
  state.
- Sequences decoded *together* do not compute bit for bit what they compute alone, under
  any setting we have: the engine's CPU kernels compute a row differently depending on
  the other rows of the batch (the exact lane-alone runs rule out state shared between
  lanes). Measured over 5 prompts and 32 greedy tokens: on the F16 test models (qwen3,
  qwen35, laguna), default settings with one KV stream per sequence
  (``--kv-unified=off``, the default before the shared pool), logprobs stay within 2.8e-3 of
  solo ones and tokens agreed; in the shared pool (the default now) the sequences' cells
  interleave and the deviation grows (laguna, 48 tokens: 5.1e-3;
  tests/native/test_preemption.py measures the pool and states its own tolerance), so
  the tests below that use ``TOL`` run with ``--kv-unified=off``; with the F32 KV cache
  or flash attention off they still differ from the third token on. On gemma3 (Q4_K_M
  weights, repacked) logprobs moved by up to 2.5 and tokens changed from the first one
  on, with weight repacking off too. So for the F16 models the test asserts what was
  measured to hold: logprobs within ``TOL / 2`` of the solo ones, and greedy tokens
  equal to the solo ones up to the first position where the solo run's two best tokens
  are less than ``TOL`` apart (where a rounding may flip them; the test then stops
  comparing that sequence). Exact equality needs the batch-invariant kernels of
  ``--deterministic=on``, where tests/native/test_deterministic.py asserts it on every
  model, gemma3 included. For gemma3 this module checks that every sequence completes.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from protocol import FramedStreamReader, SeqEnd, SeqRecord
from tests._tiers import Depth

ONE_THREAD = "--threads=1"

# Prompts of different lengths, so that with --chunk=8 prefills take 1 to 4 steps and
# end at different steps: sequences join and leave the batch at different times.
PROMPTS = [
    [9707, 11, 1879, 374, 264, 1273],
    [40, 1079, 264, 3363, 315, 279, 1879, 11, 323, 358, 1079, 1588, 311, 1492, 13, 576, 374, 1045],
    [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13],
    [1, 2, 3],
    [2610, 525, 264, 10950, 17847, 13, 22043, 279, 2701, 1467, 11, 3270, 264, 1273, 13, 576, 8678,
     374, 1602, 5538, 11, 773, 1349, 432, 15516, 13, 12564, 13],
]  # fmt: skip
N_GEN = 48
# Nats. Batched logprobs were measured within 2.8e-3 of solo ones on the F16 test models.
TOL = 0.01


def ids(prompt: list[int]) -> str:
    return "ids:" + ",".join(map(str, prompt))


class Lanes:
    """Reads a protocol 2 daemon: records per sequence off the stream, done lines off stdout."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.reader = FramedStreamReader()
        self.tokens: dict[int, list[int]] = {}
        self.records: dict[int, list[tuple[int, ...]]] = {}
        self.ended: set[int] = set()
        self.done: dict[int, str] = {}

    def pump_stream(self, timeout: float = 0.0) -> None:
        daemon = self.daemon
        if daemon._stream_buf:  # bytes the daemon's own reader already took
            data, daemon._stream_buf = daemon._stream_buf, b""
            self._feed(data)
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                daemon._wait_readable(daemon.stream_fd, time.monotonic() + remaining)
            except AssertionError:
                return
            data = os.read(daemon.stream_fd, 65536)
            if not data:
                return
            self._feed(data)
            if timeout == 0.0:
                deadline = time.monotonic()

    def _feed(self, data: bytes) -> None:
        for item in self.reader.feed(data):
            if isinstance(item, SeqEnd):
                assert item.seq not in self.ended, f"sequence {item.seq} ended twice"
                self.ended.add(item.seq)
            else:
                assert isinstance(item, SeqRecord)
                assert item.seq not in self.ended, f"record of sequence {item.seq} after its end"
                self.records.setdefault(item.seq, []).append(item.values)
                self.tokens.setdefault(item.seq, []).append(item.values[0])

    def start(self, line: str, seq: int) -> None:
        """Send a generate/restore naming ``seq`` and check its immediate reply."""
        self.tokens.pop(seq, None)
        self.records.pop(seq, None)
        self.ended.discard(seq)
        self.done.pop(seq, None)
        reply = self.command(f"{line} seq={seq}")
        assert reply == f"ok {line.split()[0]} seq={seq}", reply

    def command(self, line: str, timeout: float = 60.0) -> str:
        """Send a line; its reply, with done lines that came first recorded."""
        self.daemon.send(line)
        return self.next_reply(timeout)

    def next_reply(self, timeout: float = 60.0) -> str:
        while True:
            reply: str = self.daemon.readline(timeout)
            if not reply.startswith("done "):
                return reply
            self.on_done(reply)

    def on_done(self, line: str) -> None:
        _, seq_word, rest = line.split(" ", 2)
        seq = int(seq_word)
        # The end record was written before the done line.
        self.pump_stream(timeout=5.0 if seq not in self.ended else 0.0)
        assert seq in self.ended, f"done line of sequence {seq} before its end record"
        self.done[seq] = rest

    def wait_done(self, seqs: set[int], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not seqs <= set(self.done):
            self.pump_stream()
            self.on_done(self.daemon.readline(max(0.1, deadline - time.monotonic())))


def solo(
    spawn: Any, binary: Path, model: Path, lines: list[str], *flags: str, chunk: int = 8
) -> list[list[tuple[int, ...]]]:
    """Each line's records on a --parallel 1 daemon, one generation at a time (protocol 1).

    Every line asks for logprobs=2: a record is ``token lp alt1 lp1 alt2 lp2``.
    """
    daemon = spawn(binary, model, ONE_THREAD, f"--chunk={chunk}", *flags)
    daemon.ready()
    out = []
    for line in lines:
        values, reply = daemon.stream_command(line)
        assert reply.startswith("ok generate"), reply
        out.append([tuple(values[i:i + 6]) for i in range(0, len(values), 6)])
    assert daemon.quit() == 0
    return out


def logprob(word: int) -> float:
    return float(struct.unpack("<f", struct.pack("<i", word))[0])


def assert_near_solo(alone: list[tuple[int, ...]], batched: list[tuple[int, ...]], label: str,
                     *, greedy: bool, tol: float = TOL) -> None:
    """The rule of the module docstring: logprobs within tol / 2 while the tokens agree;
    a greedy token differs only where the solo run's best two were within tol."""
    for index, (a, b) in enumerate(zip(alone, batched, strict=False)):
        if a[0] != b[0]:
            gap = logprob(a[3]) - logprob(a[5])
            assert not greedy or gap < tol, (
                f"{label}: token {index} is {b[0]} batched, {a[0]} alone, where the best two "
                f"were {gap:.4f} apart")
            return
        for word in (1, 3, 5):
            assert abs(logprob(a[word]) - logprob(b[word])) < tol / 2, f"{label}: token {index}"
    assert len(alone) == len(batched), label


MODELS = [("qwen35", "qwen3"), ("qwen35", "qwen35"), ("laguna", "laguna")]


def model_path(name: str, test_models: dict[str, Path], default_model: Path) -> Path:
    return default_model if name == "gemma3" else test_models[name]


def mixed_lines() -> list[str]:
    """Greedy prompts with a seeded sampled and a grammar-constrained one mixed in."""
    lines = [f"generate {ids(p)} {N_GEN} ignore_eos=1 logprobs=2" for p in PROMPTS]
    lines[1] += " temp=0.9 top_k=40 seed=7"
    lines[3] = f"generate {ids(PROMPTS[3])} {N_GEN} logprobs=2 grammar=text:root%20::=%20[0-9]%2B"
    return lines


GREEDY = {0, 2, 4}  # the plain greedy lines of mixed_lines()


@pytest.mark.parametrize(("role", "model"), [*MODELS, ("qwen35", "gemma3")],
                         ids=[m for _, m in [*MODELS, ("qwen35", "gemma3")]])
def test_a_sequence_alone_on_any_lane_is_exactly_its_solo_run(
    spawn: Any, native: Any, test_models: dict[str, Path], default_model: Path, role: str,
    model: str,
) -> None:
    # Exact, with the daemon's defaults: lanes share nothing (module docstring).
    path = model_path(model, test_models, default_model)
    lines = mixed_lines()
    expected = solo(spawn, native.binary(role), path, lines)
    daemon = spawn(native.binary(role), path, ONE_THREAD, "--chunk=8", f"--parallel={len(lines)}",
                   "--n-ctx=1024")  # fmt: skip
    ready = daemon.ready()
    assert ready["parallel"] == str(len(lines)) and ready["protocols"] == "1,2"
    lanes = Lanes(daemon)
    for index, line in enumerate(lines):
        seq = len(lines) - 1 - index  # every line on another lane than its index
        lanes.start(line, seq)
        lanes.wait_done({seq})
        assert lanes.records[seq] == expected[index], f"{line} alone on sequence {seq}"
        assert f"n_gen={len(expected[index])} " in lanes.done[seq]
    assert daemon.quit() == 0


@pytest.mark.parametrize(("role", "model"), MODELS, ids=[m for _, m in MODELS])
def test_concurrent_sequences_keep_their_solo_tokens(
    spawn: Any, native: Any, test_models: dict[str, Path], role: str, model: str
) -> None:
    # Default numerics with one KV stream per sequence (--kv-unified=off), the setting
    # the tolerance was measured in; what is compared and why: the module docstring.
    lines = mixed_lines()
    expected = solo(spawn, native.binary(role), test_models[model], lines)
    daemon = spawn(native.binary(role), test_models[model], ONE_THREAD, "--chunk=8",
                   f"--parallel={len(lines)}", "--n-ctx=1024", "--kv-unified=off")  # fmt: skip
    daemon.ready()
    lanes = Lanes(daemon)
    # All at once, then again with the later ones arriving while the first decode.
    for stagger in (False, True):
        for seq, line in enumerate(lines):
            lanes.start(line, seq)
            if stagger:
                lanes.pump_stream(timeout=0.05)
        lanes.wait_done(set(range(len(lines))))
        for seq, want in enumerate(expected):
            assert lanes.done[seq].startswith("ok generate "), lanes.done[seq]
            assert_near_solo(want, lanes.records[seq], f"{lines[seq]} (stagger={stagger})",
                             greedy=seq in GREEDY)
    assert daemon.quit() == 0


@pytest.mark.parametrize("model", ["qwen35", "qwen35moe"])
def test_a_step_admitting_prompts_of_several_lengths_is_one_forward(
    spawn: Any, native: Any, test_models: dict[str, Path], qwen35moe_model: Path, model: str
) -> None:
    # On a hybrid model the recurrent layers take sequences of one length at a time. The
    # pinned engine cut a step into one forward per length; engine patch 0210 runs it as
    # one (PROTOCOL.md 9.1), LLAMA_RS_RAGGED=0 restores the cut. Three prompts of three
    # lengths arrive while a sequence decodes: each mode's forwards are counted, and each
    # sequence keeps its solo tokens (module docstring; the lookup is off so that every
    # step is one token a sequence and the step count is the long sequence's tokens).
    path = qwen35moe_model if model == "qwen35moe" else test_models[model]
    n_long = 32
    flags = ("--chunk=64", "--lookup=off")
    lines = [f"generate {ids(PROMPTS[0])} {n_long} ignore_eos=1 logprobs=2",
             *(f"generate {ids(p)} 8 ignore_eos=1 logprobs=2" for p in PROMPTS[1:4])]  # fmt: skip
    assert len({len(p) for p in PROMPTS[1:4]}) == 3
    expected = solo(spawn, native.binary("qwen35"), path, lines, *flags, chunk=64)
    forwards = {}
    for mode, env in (("ragged", {}), ("split", {"LLAMA_RS_RAGGED": "0"})):
        daemon = spawn(native.binary("qwen35"), path, ONE_THREAD, *flags, "--parallel=4",
                       "--n-ctx=1024", env=env)  # fmt: skip
        daemon.ready()
        lanes = Lanes(daemon)
        before = int(daemon.ok(lanes.command("stats"), "stats")["forwards"])
        lanes.start(lines[0], 0)
        while len(lanes.tokens.get(0, [])) < 2:
            lanes.pump_stream(timeout=0.05)
        # In one write, so that one step admits all three beside the decoding sequence.
        daemon.send("\n".join(f"{line} seq={seq}" for seq, line in enumerate(lines) if seq))
        assert [lanes.next_reply() for _ in range(3)] == [f"ok generate seq={s}" for s in (1, 2, 3)]
        lanes.wait_done({0, 1, 2, 3})
        forwards[mode] = int(daemon.ok(lanes.command("stats"), "stats")["forwards"]) - before
        for seq, want in enumerate(expected):
            assert_near_solo(want, lanes.records[seq], f"{lines[seq]} ({mode})", greedy=True)
        assert daemon.quit() == 0
    # One forward a step: the long sequence's n_long steps, the others' inside them. Cut
    # by length, a prompt's step costs one more forward per length it adds.
    assert forwards == {"ragged": n_long, "split": n_long + 3}


def test_eight_decoding_sequences_keep_their_graph_as_the_kv_pool_fills(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    # A decode step of 8 sequences fills 8 cells of the shared KV pool. The pinned
    # engine pads the attention's window (n_kv) to 256 cells, so it grew every 32 steps,
    # and each growth built the graph again (on CUDA also two steps launched kernel by
    # kernel and a capture). Engine patch 0214 pads a micro-batch of several sequences by
    # 256 cells a sequence: after the admission's forward and the first two decode
    # steps' (on this hybrid model the second's recurrent-state inputs differ from the
    # first's; on qwen3 only the first builds), every step reuses its graph
    # (`graphs_reused`, PROTOCOL.md 5.3). LLAMA_KV_PAD_PER_SEQ=0 pads as the pinned
    # engine does: 99 prompt cells and 8 x 63 decoded ones pass 256 and 512, two more
    # builds.
    n_gen = 64
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
    assert sum(map(len, prompts)) == 99
    lines = [f"generate {ids(p)} {n_gen} ignore_eos=1 seq={seq}" for seq, p in enumerate(prompts)]
    built = {}
    for mode, env in (("default", {}), ("upstream", {"LLAMA_KV_PAD_PER_SEQ": "0"})):
        daemon = spawn(native.binary("qwen35"), test_models["qwen35"], ONE_THREAD, "--chunk=128",
                       "--lookup=off", "--parallel=8", "--n-ctx=4096", env=env)  # fmt: skip
        daemon.ready()
        lanes = Lanes(daemon)
        before = daemon.ok(lanes.command("stats"), "stats")
        daemon.send("\n".join(lines))  # one write: one step admits all eight
        assert [lanes.next_reply() for _ in lines] == [f"ok generate seq={s}" for s in range(8)]
        lanes.wait_done(set(range(8)))
        assert all(len(lanes.tokens[seq]) == n_gen for seq in range(8))
        after = daemon.ok(lanes.command("stats"), "stats")
        forwards = int(after["forwards"]) - int(before["forwards"])
        assert forwards == n_gen  # the admission's, then one a token
        built[mode] = forwards - (int(after["graphs_reused"]) - int(before["graphs_reused"]))
        assert daemon.quit() == 0
    assert built == {"default": 3, "upstream": 5}


def test_gemma3_concurrent_sequences_complete(spawn: Any, native: Any, default_model: Path) -> None:
    # Q4_K_M weights: batched tokens differ from solo ones (module docstring).
    daemon = spawn(native.binary("qwen35"), default_model, ONE_THREAD, "--chunk=8", "--parallel=4",
                   "--n-ctx=1024")  # fmt: skip
    daemon.ready()
    lanes = Lanes(daemon)
    for seq, prompt in enumerate(PROMPTS[:4]):
        lanes.start(f"generate {ids(prompt)} 16 ignore_eos=1", seq)
    lanes.wait_done({0, 1, 2, 3})
    for seq in range(4):
        assert len(lanes.tokens[seq]) == 16 and "finish=length" in lanes.done[seq]
    assert daemon.quit() == 0


def test_cancel_one_sequence_leaves_the_others_alone(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    model = test_models["qwen3"]
    lines = [f"generate {ids(p)} {N_GEN} ignore_eos=1 logprobs=2" for p in PROMPTS[:4]]
    expected = solo(spawn, native.binary("qwen35"), model, lines)
    daemon = spawn(native.binary("qwen35"), model, ONE_THREAD, "--chunk=8", "--parallel=4",
                   "--n-ctx=2048", "--kv-unified=off")  # fmt: skip  (the tolerance's setting)
    daemon.ready()
    lanes = Lanes(daemon)
    long_line = f"generate {ids(PROMPTS[2])} 400 ignore_eos=1"
    for seq, line in enumerate(lines):
        lanes.start(long_line if seq == 2 else line, seq)
    # Sequence 2 is cancelled once it has written a few tokens.
    deadline = time.monotonic() + 60
    while len(lanes.tokens.get(2, [])) < 3:
        assert time.monotonic() < deadline
        lanes.pump_stream(timeout=0.05)
    assert lanes.command("cancel 2") == "ok cancel seq=2 running=1"
    lanes.wait_done({0, 1, 2, 3})
    assert "finish=cancelled" in lanes.done[2]
    assert 3 <= len(lanes.tokens[2]) < 400
    for seq in (0, 1, 3):
        assert_near_solo(expected[seq], lanes.records[seq],
                         f"sequence {seq} beside a cancelled one", greedy=True)
    # The lane is free again, and cancelling a finished lane stops nothing.
    assert lanes.command("cancel 2") == "ok cancel seq=2 running=0"
    lanes.start(lines[2] + " reuse=0", 2)
    lanes.wait_done({2})
    assert lanes.records[2] == expected[2]  # alone: exact
    assert daemon.quit() == 0


def test_protocol_2_errors_and_waiting_commands(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], ONE_THREAD, "--parallel=2",
                   "--n-ctx=512")  # fmt: skip
    daemon.ready()
    lanes = Lanes(daemon)
    prompt = ids(PROMPTS[0])
    lanes.start(f"generate {prompt} 200 ignore_eos=1", 0)
    assert daemon.err(lanes.command(f"generate {prompt} 4 seq=0")) == "seq_busy"
    assert daemon.err(lanes.command(f"generate {prompt} 4 seq=2")) == "bad_seq"
    assert daemon.err(lanes.command(f"generate {prompt} 4 seq=x")) == "bad_seq"
    assert daemon.err(lanes.command("cancel 7")) == "bad_seq"
    assert daemon.err(lanes.command("snapshot 0 seq=0")) == "seq_busy"
    # One sequence may fill the whole pool of 512 cells, no more (--kv-unified=off: 256).
    overflow = lanes.command(f"generate {prompt} 600 seq=1")
    assert daemon.err(overflow) == "context_overflow" and "n_ctx_seq=512 (the pool)" in overflow
    # Refused protocol 2 lines write nothing to the stream; alongside commands answer now.
    assert lanes.command("stats").startswith("ok stats ")
    assert lanes.command("detokenize ids:9707").startswith("ok detokenize ")
    assert 0 not in lanes.done
    # A protocol 1 stream command waits for the running sequence, then streams bare ids:
    # on the stream, sequence 0's records and end record come first.
    daemon.send("tokenize text:Hello")
    done = daemon.readline()
    assert done.startswith("done 0 ok generate ") and "n_gen=200" in done, done
    n = int(daemon.ok(daemon.readline(), "tokenize")["n"])
    records = [(daemon.read_value(), daemon.read_value(), daemon.read_value()) for _ in range(200)]
    assert all(seq == 0 and length == 1 for seq, length, _ in records)
    assert (daemon.read_value(), daemon.read_value()) == (0, -1)
    assert len(daemon.read_stream()) == n
    # A snapshot of a sequence, restored on the other lane, continues it exactly.
    lanes.start(f"generate {prompt} 8 ignore_eos=1", 1)
    lanes.wait_done({1})
    first = lanes.tokens[1]
    assert lanes.command("snapshot 3 seq=1").startswith("ok snapshot slot=3 n_tokens=13 ")
    lanes.start(f"restore 3 {prompt},{','.join(map(str, first[:7]))} 4 ignore_eos=1", 0)
    lanes.wait_done({0})
    assert "n_reused=13" in lanes.done[0]
    lanes.start(f"generate {prompt} 12 ignore_eos=1 reuse=0", 1)
    lanes.wait_done({1})
    assert lanes.tokens[0] == lanes.tokens[1][7:11]
    assert daemon.quit() == 0


def test_parallel_1_speaks_protocol_2(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    model = test_models["qwen3"]
    daemon = spawn(native.binary("qwen35"), model, ONE_THREAD)
    ready = daemon.ready()
    # One sequence: the ready line is protocol 1's, byte for byte; seq=0 works all the same.
    assert ready["protocol"] == "1" and "protocols" not in ready and "parallel" not in ready
    tokens, _ = daemon.stream_command(f"generate {ids(PROMPTS[0])} 6 ignore_eos=1 logprobs=2")
    lanes = Lanes(daemon)
    lanes.start(f"generate {ids(PROMPTS[0])} 6 ignore_eos=1 logprobs=2 reuse=0", 0)
    lanes.wait_done({0})
    # Records of 2 + 2K words, each the protocol 1 record framed.
    assert [len(r) for r in lanes.records[0]] == [6] * 6
    assert [w for r in lanes.records[0] for w in r] == tokens
    assert daemon.quit() == 0


def test_eof_waits_for_running_sequences(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], ONE_THREAD, "--parallel=3")
    daemon.ready()
    lanes = Lanes(daemon)
    for seq in range(3):
        lanes.start(f"generate {ids(PROMPTS[seq])} 20 ignore_eos=1", seq)
    assert daemon.proc.stdin is not None
    daemon.proc.stdin.close()
    lanes.wait_done({0, 1, 2})
    assert all(len(lanes.tokens[s]) == 20 for s in range(3))
    assert daemon.wait() == 0


class StreamSplitter:
    """The stream of a protocol 2 daemon that also runs protocol 1 stream commands:
    framed records while sequences run, bare values up to -1 for a protocol 1 command
    (which the daemon runs only once every sequence has ended, PROTOCOL.md 9.3)."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.buf = bytearray()
        self.records: dict[int, int] = {}  # tokens written per running sequence
        self.ended: set[int] = set()

    def fill(self, timeout: float) -> bool:
        daemon = self.daemon
        try:
            daemon._wait_readable(daemon.stream_fd, time.monotonic() + timeout)
        except AssertionError:
            return False
        data = os.read(daemon.stream_fd, 65536)
        assert data, "stream fd closed"
        self.buf += data
        return True

    def word(self, at: int) -> int:
        return int(struct.unpack_from("<i", self.buf, at)[0])

    def framed(self, until_ended: set[int] | None = None, timeout: float = 0.0) -> None:
        """Consume whole records; with ``until_ended``, up to the end of those sequences
        and no further (what follows may be the records of a sequence's next generation)."""
        deadline = time.monotonic() + timeout
        while True:
            while len(self.buf) >= 8 and not (until_ended and until_ended <= self.ended):
                seq, length = self.word(0), self.word(4)
                assert 0 <= seq < 4, f"record of sequence {seq}"
                if length == -1:
                    assert seq not in self.ended, f"sequence {seq} ended twice"
                    self.ended.add(seq)
                    del self.buf[:8]
                    continue
                assert length in (1, 2, 4, 6, 42), f"record of {length} words"
                if len(self.buf) < 8 + 4 * length:
                    break
                assert seq not in self.ended, f"record of sequence {seq} after its end"
                self.records[seq] = self.records.get(seq, 0) + 1
                del self.buf[: 8 + 4 * length]
            if until_ended is None or until_ended <= self.ended:
                return
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"sequences {until_ended - self.ended} never ended"
            self.fill(remaining)

    def protocol_1(self, timeout: float = 30.0) -> list[int]:
        """Bare values up to the -1 of a protocol 1 stream command."""
        values: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            while len(self.buf) >= 4:
                value = self.word(0)
                del self.buf[:4]
                if value == -1:
                    return values
                values.append(value)
            assert self.fill(max(0.0, deadline - time.monotonic())), "no -1"


def frames_its_output(line: bytes) -> bool:
    """Whether the daemon runs ``line`` as protocol 2 (a generate or restore naming seq=),
    found as the daemon's reader finds it (command_queue.cpp)."""
    from protocol import MalformedLineError, parse_command_line

    line = line.rstrip(b"\r")
    if line.lstrip(b" ").split(b" ", 1)[0] not in (b"generate", b"restore"):
        return False
    try:
        return "seq" in parse_command_line(line).options
    except MalformedLineError:
        return b" seq=" in line


def test_fuzz_lines_against_running_sequences(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path, depth: Depth
) -> None:
    """10,000 lines (1,000 in the fast tier), most of them protocol 2 forms, while up to 4
    sequences run: every line gets exactly one reply in order, every accepted generation
    exactly one end record and then one done line with its token count, and the daemon
    survives."""
    from tests.native.test_robustness import LineFuzzer, expected_reply

    max_line = 4096
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x00")
    (tmp_path / "prompt.bin").write_bytes(b"\x01\x00\x00\x00\x02\x00\x00\x00")
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=1024", "--slots=8",
                   "--parallel=4", f"--max-line={max_line}", ONE_THREAD, cwd=tmp_path)  # fmt: skip
    daemon.ready()
    fuzzer = LineFuzzer(seed=20261202, tmp=tmp_path, max_line=max_line)
    r = fuzzer.rng
    prompt = "ids:9707,1879,11"

    def v2_line() -> str:
        seq = r.choice(["0", "1", "2", "3", "3", "4", "-1", "x", "01", "%31", ""])
        kind = r.random()
        if kind < 0.70:
            # Long enough to run across many lines, short enough that the lines that
            # wait for every sequence to end (most of the run's time) stay short.
            n_gen = r.choice([1, 5, 20, 40, 80, 160, 0])
            options = r.sample(["temp=0.8 seed=3", "logprobs=2", "stop=11", "ignore_eos=1",
                                "grammar=text:root%20::=%20[0-9]%2B", "reuse=0", "snap=2:1",
                                "top_k=x", "marks=1,2"], r.randrange(0, 3))  # fmt: skip
            head = (f"restore {r.randrange(0, 9)} {prompt},13" if r.random() < 0.15
                    else f"generate {r.choice([prompt, fuzzer.ids()])}")
            if r.random() < 0.7:
                options.append("ignore_eos=1")
            return " ".join([head, str(n_gen), *dict.fromkeys(options), f"seq={seq}"])
        if kind < 0.76:
            return f"cancel {seq}" if r.random() < 0.9 else "cancel"
        if kind < 0.98:
            return r.choice([f"snapshot {r.randrange(0, 9)} seq={seq}", "list_slots", "stats",
                             f"free_snapshot {r.randrange(8)}", "detokenize ids:9707,1879"])
        return fuzzer.soup() + f" seq={seq}"

    splitter = StreamSplitter(daemon)
    running: dict[int, str] = {}
    counts = dict.fromkeys(
        ("lines", "beside_running", "accepted", "done", "waited", "max_running"), 0)

    def on_done(line: str) -> None:
        _, seq_word, rest = line.split(" ", 2)
        seq = int(seq_word)
        assert seq in running, f"done line of sequence {seq}, which runs nothing: {line}"
        splitter.framed(until_ended={seq}, timeout=10.0)  # its end record came first
        if rest.startswith("ok "):
            n_gen = int(daemon.ok(rest, rest.split(" ")[1])["n_gen"])
            assert splitter.records.get(seq, 0) == n_gen, f"{running[seq]} -> {line}"
        splitter.records.pop(seq, None)
        splitter.ended.discard(seq)
        del running[seq]
        counts["done"] += 1

    n_lines = depth(quick=1_000, full=10_000)
    for index in range(n_lines):
        # Few lines that wait (PROTOCOL.md 9.3): each lets every running sequence end.
        raw = v2_line() if r.random() < 0.985 else fuzzer.line().decode("utf-8", "replace")
        line = raw.encode()
        line = line.replace(b"\n", b"")
        if line.lstrip(b" ").split(b" ", 1)[0].rstrip(b"\r") in (b"quit", b"exit"):
            line += b" now"
        reply_expected, v1_stream = expected_reply(line, max_line)
        v2 = len(line) <= max_line and frames_its_output(line)
        v1_stream = v1_stream and not v2
        context = f"line {index}: {line[:200]!r}"
        assert daemon.proc.stdin is not None
        daemon.proc.stdin.write(line + b"\n")
        daemon.proc.stdin.flush()
        counts["lines"] += 1
        counts["beside_running"] += bool(running)
        if reply_expected:
            while True:
                reply = daemon.readline(timeout=60)
                if not reply.startswith("done "):
                    break
                on_done(reply)
            assert reply.startswith(("ok ", "err ")), f"{context} -> {reply!r}"
            if v2 and reply.startswith(("ok generate seq=", "ok restore seq=")):
                seq = int(reply.rsplit("=", 1)[1])
                assert seq not in running, f"{context}: sequence {seq} accepted twice"
                running[seq] = line.decode("utf-8", "replace")
                counts["accepted"] += 1
                counts["max_running"] = max(counts["max_running"], len(running))
        if v1_stream:
            assert not running, f"{context} ran beside sequences {sorted(running)}"
            splitter.protocol_1()
            counts["waited"] += 1
        else:
            splitter.framed()
        assert daemon.proc.poll() is None, (
            f"{context} killed the daemon:\n{daemon.stderr()[-3000:]}")
    # Every sequence left stops. Done lines come whenever a sequence ends (PROTOCOL.md
    # 9.2), so one, even of a sequence this cancel ended, can come ahead of its reply.
    assert daemon.proc.stdin is not None
    daemon.proc.stdin.write(b"cancel\n")
    daemon.proc.stdin.flush()
    while (reply := daemon.readline(timeout=60)).startswith("done "):
        on_done(reply)
    assert reply.startswith("ok cancel"), reply
    while running:
        on_done(daemon.readline(timeout=60))
    print(f"fuzz: {counts}")
    assert (counts["accepted"] > n_lines // 20 and counts["max_running"] == 4
            and counts["waited"] > n_lines // 500)
    assert counts["beside_running"] > n_lines * 6 // 10
    assert daemon.quit() == 0


def test_sigterm_cancels_running_sequences_and_exits_0(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], ONE_THREAD, "--parallel=3",
                   "--n-ctx=1536")  # fmt: skip
    daemon.ready()
    lanes = Lanes(daemon)
    for seq in range(3):
        lanes.start(f"generate {ids(PROMPTS[seq])} 480 ignore_eos=1", seq)
    while not lanes.tokens.get(2):
        lanes.pump_stream(timeout=0.05)
    daemon.proc.send_signal(signal.SIGTERM)
    lanes.wait_done({0, 1, 2})
    assert all("finish=cancelled" in lanes.done[seq] for seq in range(3)), lanes.done
    assert all(len(lanes.tokens.get(seq, [])) < 480 for seq in range(3))
    assert daemon.wait() == 0
