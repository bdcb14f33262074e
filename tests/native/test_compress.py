"""pflash's `compress` (PROTOCOL.md 5.7) over raw pipes: framing, determinism, whole
chunks in their original order, the keep ratio, errors, and on the real default model
(Gemma 3 270M) a needle in a haystack that must survive a keep ratio of 0.2."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.native.conftest import Daemon

# Distinct ids, so every kept token tells where it came from.
N_PROMPT = 300
PROMPT = list(range(1000, 1000 + N_PROMPT))
INLINE = "ids:" + ",".join(map(str, PROMPT))


@pytest.fixture(scope="module")
def pflash(native: Any, test_models: dict[str, Path]) -> Any:
    daemon = Daemon(native.binary("pflash"), test_models["qwen3"], "--n-ctx=512")
    try:
        ready = daemon.ready()
        assert ready["capabilities"].split(",")[-1] == "compress"
        yield daemon
    finally:
        daemon.close()


def kept_chunks(kept: list[int], chunk: int) -> list[int]:
    """The chunk numbers `kept` consists of; fails unless it is whole chunks, in order."""
    positions = [PROMPT.index(token) for token in kept]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    chunks = sorted({p // chunk for p in positions})
    for c in chunks:
        whole = list(range(c * chunk, min(N_PROMPT, (c + 1) * chunk)))
        assert [p for p in positions if p // chunk == c] == whole, f"chunk {c} is not whole"
    return chunks


def kept_length(n: int, keep: int, chunk: int) -> int:
    """How many of ``n`` ids ``compress`` keeps (PROTOCOL.md 5.7): the best
    ceil(n_chunks * keep / 1000) chunks, at least the first and the last, which is the
    only chunk shorter than ``chunk``."""
    n_chunks = -(-n // chunk)
    n_keep = min(max(-(-n_chunks * keep // 1000), min(2, n_chunks)), n_chunks)
    return (n_keep - 1) * chunk + (n - (n_chunks - 1) * chunk)


def test_framing_order_and_determinism(pflash: Any) -> None:
    kept, reply = pflash.stream_command(f"compress {INLINE} 250")
    fields = pflash.ok(reply, "compress")
    assert fields["n_in"] == str(N_PROMPT) and fields["n_out"] == str(len(kept))
    assert float(fields["ms"]) > 0
    chunks = kept_chunks(kept, 32)
    n_chunks = (N_PROMPT + 31) // 32
    assert chunks[0] == 0 and chunks[-1] == n_chunks - 1  # first and last always kept
    again, _ = pflash.stream_command(f"compress {INLINE} 250")
    assert again == kept
    assert pflash.stream_is_empty()  # exactly one -1 per command


@pytest.mark.parametrize(("keep", "chunk"), [(100, 32), (250, 32), (500, 16), (50, 8), (1000, 32)])
def test_keep_ratio_in_chunk_units(keep: int, chunk: int, pflash: Any) -> None:
    kept, reply = pflash.stream_command(
        f"compress {INLINE} {keep} chunk={chunk} pool=5 lookahead=4"
    )
    pflash.ok(reply, "compress")
    kept_chunks(kept, chunk)
    # Exactly the documented count: a rounding down (or a chunk too many) is one chunk
    # off, which a tolerance of a chunk around N_PROMPT * keep / 1000 did not see.
    assert len(kept) == kept_length(N_PROMPT, keep, chunk), (len(kept), keep, chunk)
    if keep == 1000:
        assert kept == PROMPT


def test_a_prompt_within_one_segment_is_scored_in_one_pass(pflash: Any) -> None:
    one_pass, _ = pflash.stream_command(f"compress {INLINE} 250")
    for segment in (0, N_PROMPT - 8, 100_000):  # 8: the lookahead queries are not scored
        kept, _ = pflash.stream_command(f"compress {INLINE} 250 segment={segment}")
        assert kept == one_pass, segment


@pytest.mark.slow
@pytest.mark.parametrize("segment", [1, 64, 100])
def test_segmented_scoring_keeps_whole_chunks_deterministically(segment: int, pflash: Any) -> None:
    kept, reply = pflash.stream_command(f"compress {INLINE} 250 segment={segment}")
    pflash.ok(reply, "compress")
    chunks = kept_chunks(kept, 32)
    assert chunks[0] == 0 and chunks[-1] == (N_PROMPT + 31) // 32 - 1
    assert len(kept) == kept_length(N_PROMPT, 250, 32)
    again, _ = pflash.stream_command(f"compress {INLINE} 250 segment={segment}")
    assert again == kept


def test_tiny_prompts(pflash: Any) -> None:
    kept, _ = pflash.stream_command("compress ids:7 1")
    assert kept == [7]
    kept, _ = pflash.stream_command("compress ids:7,8,9 100 chunk=1 lookahead=8")
    assert kept == [7, 9]  # first and last chunk, nothing else fits 10 %
    kept, _ = pflash.stream_command(f"compress {INLINE} 1 chunk=1000")
    assert kept == PROMPT  # one chunk: it is both the first and the last


def test_token_file_input(pflash: Any, tmp_path: Path) -> None:
    path = tmp_path / "prompt.ids"
    path.write_bytes(struct.pack(f"<{N_PROMPT}i", *PROMPT))
    from_file, _ = pflash.stream_command(f"compress {path} 300")
    inline, _ = pflash.stream_command(f"compress {INLINE} 300")
    assert from_file == inline


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("compress ids: 100", "empty_prompt"),
        ("compress ids:1,2,99999999 100", "bad_token"),
        ("compress ids:-1 100", "bad_token"),
        ("compress ids:" + ",".join(["5"] * 513) + " 100", "context_overflow"),
        ("compress ids:1,2 0", "bad_args"),
        ("compress ids:1,2 1001", "bad_args"),
        ("compress ids:1,2 half", "bad_args"),
        ("compress ids:1,2", "bad_args"),
        ("compress ids:1,2 100 lookahead=0", "bad_args"),
        ("compress ids:1,2 100 chunk=0", "bad_args"),
        ("compress ids:1,2 100 pool=-3", "bad_args"),
        ("compress ids:1,2 100 segment=-1", "bad_args"),
        ("compress ids:1,2 100 window=3", "bad_args"),
        ("compress /nonexistent/prompt.ids 100", "bad_token_file"),
    ],
)
def test_errors_write_one_terminator(line: str, code: str, pflash: Any) -> None:
    values, reply = pflash.stream_command(line)
    assert values == [] and pflash.err(reply) == code
    assert pflash.stream_is_empty(0.05)


def test_without_a_stream_fd(spawn: Any, native: Any, test_models: dict[str, Path]) -> None:
    daemon = spawn(native.binary("pflash"), test_models["qwen3"], "--n-ctx=512", stream=False)
    daemon.ready()
    assert daemon.err(daemon.command("compress ids:1,2 100")) == "no_stream_fd"


@pytest.mark.parametrize(("role", "model"), [("qwen35", "qwen3"), ("laguna", "laguna")])
def test_other_roles_answer_unsupported(
    role: str, model: str, spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary(role), test_models[model], "--n-ctx=512")
    assert "compress" not in daemon.ready()["capabilities"].split(",")
    values, reply = daemon.stream_command("compress ids:1,2 50")
    assert values == []
    assert reply == "err unsupported compress is served by the pflash role"


def test_parked_then_unparked(pflash: Any) -> None:
    before, _ = pflash.stream_command(f"compress {INLINE} 200")
    pflash.ok(pflash.command("park"), "park")
    values, reply = pflash.stream_command(f"compress {INLINE} 200")
    assert values == [] and pflash.err(reply) == "parked"
    pflash.ok(pflash.command("unpark"), "unpark")
    after, _ = pflash.stream_command(f"compress {INLINE} 200")
    assert after == before


# -- the real drafter ---------------------------------------------------------------

FILLER = [
    "The weather in the valley was mild for most of the season.",
    "Farmers brought their produce to the market every Tuesday morning.",
    "A small river ran past the old mill at the edge of town.",
    "Children played in the square while their parents talked.",
    "The library kept its doors open late during the winter months.",
    "Travelers often stopped at the inn to rest their horses.",
    "The baker was known for bread that stayed fresh for days.",
    "Along the road, tall poplar trees swayed in the afternoon wind.",
    "The town council met once a month to discuss repairs.",
    "In the evenings, lanterns were lit along the main street.",
]
NEEDLE = "The secret passphrase is violet harbor forty two."
QUESTION = "\n\nQuestion: What is the secret passphrase mentioned in the text above? Answer:"


def contains(haystack: list[int], needle: list[int]) -> bool:
    return any(
        haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1)
    )


@pytest.mark.slow
@pytest.mark.parametrize("segment", [0, 512])
def test_the_needle_survives_a_keep_ratio_of_one_fifth(
    segment: int, spawn: Any, native: Any, default_model: Path, tmp_path: Path
) -> None:
    """In one pass and in three segments of 512 tokens (the needle sits in the middle one)."""
    daemon = spawn(native.binary("pflash"), default_model, "--n-ctx=2048")
    assert daemon.ready()["arch"] == "gemma3"
    rng = random.Random(0)
    sentences = [rng.choice(FILLER) for _ in range(120)]
    sentences.insert(len(sentences) // 2, NEEDLE)
    text = " ".join(sentences) + QUESTION
    prompt, _ = daemon.stream_command(f"tokenize text:{quote(text, safe='')}")
    needle, _ = daemon.stream_command(f"tokenize text:{quote(' ' + NEEDLE, safe='')} add_bos=0")
    assert 1300 <= len(prompt) <= 1700 and contains(prompt, needle)
    path = tmp_path / "haystack.ids"
    path.write_bytes(struct.pack(f"<{len(prompt)}i", *prompt))

    kept, reply = daemon.stream_command(f"compress {path} 200 segment={segment}", timeout=300)
    fields = daemon.ok(reply, "compress")
    assert int(fields["n_out"]) == len(kept) == kept_length(len(prompt), 200, 32)
    assert contains(kept, needle), "the needle did not survive compression"
    # The question at the end is always kept (last chunk).
    assert kept[-8:] == prompt[-8:]
