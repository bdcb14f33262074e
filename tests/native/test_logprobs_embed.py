"""``generate ... logprobs=K`` (PROTOCOL.md 5.1) and ``embed`` (5.11), over raw pipes.

Logprobs: the records the reader in protocol/ parses, the top-1 alternative is the greedy
pick, asking for them changes no token (greedy or sampled), and a daemon with a DFlash
draft gives the autoregressive records bit for bit (it decodes such a request without
proposals, PROTOCOL.md 5.9). Embed: deterministic, inputs in one command equal inputs one at a
time, and the live sequence is cleared, not corrupted: the next generate starts cold
and gives the same tokens as before.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

from protocol import LogprobStreamReader, TokenLogprobs
from tests.native.test_dflash import EXACT, exact_model, ids, prompts  # noqa: F401

ONE_THREAD = "--threads=1"
PROMPT = "ids:9707,1879,11"


def records(values: list[int], k: int) -> list[TokenLogprobs]:
    reader = LogprobStreamReader(k)
    out = reader.feed(struct.pack(f"<{len(values) + 1}i", *values, -1))
    assert reader.finished
    return out


def test_logprobs_records_and_the_greedy_pick(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], ONE_THREAD)
    daemon.ready()
    plain, _ = daemon.stream_command(f"generate {PROMPT} 12 ignore_eos=1")
    values, reply = daemon.stream_command(f"generate {PROMPT} 12 ignore_eos=1 logprobs=5")
    assert daemon.ok(reply, "generate")["n_gen"] == "12"
    got = records(values, 5)
    assert [r.token for r in got] == plain
    for r in got:
        assert r.top[0] == (r.token, r.logprob)  # greedy: the argmax, ties to the lower id
        assert all(math.isfinite(lp) and lp <= 0.0 for _, lp in r.top)
        assert [lp for _, lp in r.top] == sorted((lp for _, lp in r.top), reverse=True)
        assert len({i for i, _ in r.top}) == 5
        assert sum(math.exp(lp) for _, lp in r.top) <= 1.0 + 1e-5
    only, _ = daemon.stream_command(f"generate {PROMPT} 12 ignore_eos=1 logprobs=0")
    assert records(only, 0) == [TokenLogprobs(r.token, r.logprob, ()) for r in got]
    # Sampled: the same draws with and without logprobs; the chosen token need not lead.
    sampled, _ = daemon.stream_command(f"generate {PROMPT} 12 ignore_eos=1 temp=1.5 seed=3")
    values, _ = daemon.stream_command(
        f"generate {PROMPT} 12 ignore_eos=1 temp=1.5 seed=3 logprobs=2")
    assert [r.token for r in records(values, 2)] == sampled
    # Restore takes the option too; an out-of-range K is refused with its -1.
    daemon.stream_command(f"generate {PROMPT} 1")
    assert daemon.ok(daemon.command("snapshot 0"), "snapshot")["n_tokens"] == "3"
    values, reply = daemon.stream_command(f"restore 0 {PROMPT} 3 logprobs=1")
    assert len(records(values, 1)) == int(daemon.ok(reply, "restore")["n_gen"])
    values, reply = daemon.stream_command(f"generate {PROMPT} 3 logprobs=21")
    assert values == [] and daemon.err(reply) == "bad_args"


def test_logprobs_with_a_draft_are_the_autoregressive_ones(
    spawn: Any, native: Any, test_models: dict[str, Path], exact_model: Path  # noqa: F811
) -> None:
    """A request for logprobs on a daemon with a draft decodes without proposals, so its
    records are bit for bit those of the same daemon without one, on the F16 test model
    (where a verify row and a decode step differ by up to ~1e-3) as on the F32 setup.
    Requests without logprobs still speculate, and their tokens do not change."""
    for model, setup in ((test_models["qwen35"], ()), (exact_model, EXACT)):
        plain = spawn(native.binary("qwen35"), model, "--n-ctx=512", ONE_THREAD, *setup)
        drafted = spawn(native.binary("qwen35"), model, "--n-ctx=512", ONE_THREAD, *setup,
                        f"--draft={test_models['dflash']}")
        plain.ready()
        assert drafted.ready()["spec"] == "dflash"
        cases = prompts(6, seed=11)
        speculated = [drafted.stream_command(f"generate {ids(p)} 16 ignore_eos=1 reuse=0")
                      for p in cases]
        assert all(int(drafted.ok(reply, "generate")["draft_steps"]) > 0
                   for _, reply in speculated)
        for prompt in cases:
            for options in ("logprobs=3", "logprobs=0 temp=0.9 seed=5",
                            "logprobs=2 prompt_logprobs=1"):
                command = f"generate {ids(prompt)} 16 ignore_eos=1 reuse=0 {options}"
                expected, _ = plain.stream_command(command)
                values, reply = drafted.stream_command(command)
                assert values == expected, (model.name, prompt, options)
                fields = drafted.ok(reply, "generate")
                assert (fields["draft_steps"], fields["draft_proposed"],
                        fields["draft_accepted"]) == ("0", "0", "0")
        # The requests without logprobs speculate as before, with the same tokens.
        again = [drafted.stream_command(f"generate {ids(p)} 16 ignore_eos=1 reuse=0")
                 for p in cases]
        assert [t for t, _ in again] == [t for t, _ in speculated]
        assert [drafted.ok(r, "generate")["draft_steps"] for _, r in again] == [
            drafted.ok(r, "generate")["draft_steps"] for _, r in speculated]
        plain.close()
        drafted.close()


def embeddings(path: Path, n: int, dim: int) -> list[tuple[float, ...]]:
    data = path.read_bytes()
    assert len(data) == n * dim * 4
    flat = struct.unpack(f"<{n * dim}f", data)
    return [flat[i * dim:(i + 1) * dim] for i in range(n)]


def test_embed_batches_and_leaves_no_state_behind(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen35"], ONE_THREAD, "--chunk=4")
    daemon.ready()
    before, reply = daemon.stream_command(f"generate {PROMPT} 6 ignore_eos=1")
    assert daemon.ok(daemon.command("snapshot 3"), "snapshot")["n_tokens"] == "8"
    inputs = [[9707, 1879, 11], [42], list(range(100, 170))]  # the last spans decodes
    flat = ",".join(str(i) for one in inputs for i in one)
    lengths = ",".join(str(len(one)) for one in inputs)
    reply = daemon.command(f"embed ids:{flat} {tmp_path / 'all.f32'} lengths={lengths}")
    fields = daemon.ok(reply, "embed")
    dim = int(fields["dim"])
    assert (fields["n"], fields["n_tokens"], dim) == ("3", str(sum(map(len, inputs))), 64)
    together = embeddings(tmp_path / "all.f32", 3, dim)
    for index, one in enumerate(inputs):
        path = tmp_path / f"{index}.f32"
        daemon.ok(daemon.command(f"embed ids:{','.join(map(str, one))} {path}"), "embed")
        assert embeddings(path, 1, dim) == [together[index]]  # bit for bit
    assert together[0] != together[1] and all(map(math.isfinite, together[2]))
    daemon.ok(daemon.command(f"embed ids:{flat} {tmp_path / 'last.f32'} lengths={lengths} "
                             "pooling=last"), "embed")
    assert embeddings(tmp_path / "last.f32", 3, dim)[1] == together[1]  # one token: same
    # The live sequence was cleared: nothing is reused from it, and the tokens are those
    # of a cold start; the slot is untouched and still reused.
    after, reply = daemon.stream_command(f"generate {PROMPT} 6 ignore_eos=1")
    assert after == before and daemon.ok(reply, "generate")["n_cached"] == "0"
    daemon.ok(daemon.command(f"embed ids:42 {tmp_path / 'again.f32'}"), "embed")
    extended = f"{PROMPT},{','.join(map(str, before[:5]))},7"
    after, reply = daemon.stream_command(f"generate {extended} 2")
    assert daemon.ok(reply, "generate").get("cache_slot") == "3"
    # Refusals.
    for line, code in [
        (f"embed ids:1,2 {tmp_path / 'x'} lengths=1", "bad_args"),
        (f"embed ids:1,2 {tmp_path / 'x'} lengths=0,2", "empty_prompt"),
        (f"embed ids:151936 {tmp_path / 'x'}", "bad_token"),
        (f"embed ids:{','.join(['1'] * 5000)} {tmp_path / 'x'}", "context_overflow"),
        (f"embed ids:1 {tmp_path / 'no' / 'dir' / 'x'}", "io_failed"),
    ]:
        assert daemon.err(daemon.command(line)) == code, line
    assert not (tmp_path / "x").exists()
    assert daemon.ok(daemon.command("park target"), "park")
    assert daemon.err(daemon.command(f"embed ids:1 {tmp_path / 'x'}")) == "parked"
