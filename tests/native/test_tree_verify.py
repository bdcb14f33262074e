"""Tree verify (DDTree, PROTOCOL.md 5.9, ``--draft-tree``) in the qwen35 daemon.

A tree step decodes every branch of the candidate tree as a sequence of its own and
commits the longest path the target agrees with (native/src/commands/tree_verify.h). It
must be lossless: the greedy tokens are the autoregressive ones, checked on the exact
setup of test_dflash.py (F32 weights and cache, the deterministic mode). The oracle puts
the transcript's token at a chosen rank at the position its schedule gets wrong
(``--oracle-rank``), so the walk leaves the first branch at every depth the schedule
reaches, and the recurrent state of the branch it ends on must be the one kept.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.native.test_dflash import (
    EXACT,
    ONE_THREAD,
    exact_model,  # noqa: F401 (a fixture)
    ids,
    oracle_schedule,
    prompts,
    write_transcripts,
)

N_PROMPTS = 12
N_GEN = 40


@pytest.fixture(scope="module")
def reference(
    native: Any,
    exact_model: Path,  # noqa: F811
    spawn_for_module: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[list[int]], list[list[int]], Path]]:
    """Autoregressive greedy continuations and the oracle's transcript file."""
    daemon = spawn_for_module(
        native.binary("qwen35"), exact_model, "--n-ctx=512", ONE_THREAD, *EXACT
    )
    daemon.ready()
    cases = prompts(N_PROMPTS, seed=11)
    outputs = [daemon.stream_command(f"generate {ids(p)} {N_GEN} ignore_eos=1")[0] for p in cases]
    path = write_transcripts(tmp_path_factory.mktemp("tree"), cases, outputs)
    daemon.quit()
    yield cases, outputs, path


def run_all(daemon: Any, cases: list[list[int]], outputs: list[list[int]]) -> dict[str, str]:
    for prompt, expected in zip(cases, outputs, strict=True):
        tokens, reply = daemon.stream_command(f"generate {ids(prompt)} {N_GEN} ignore_eos=1")
        assert tokens == expected, (prompt, tokens, expected)
        daemon.ok(reply, "generate")
    stats: dict[str, str] = daemon.ok(daemon.command("stats"), "stats")
    return stats


# (acceptance, the truth's rank at the miss, budget, branches). The oracle is sure of
# its right proposals (0.9) and unsure at the miss, so best-first spends the budget down
# the first branch and on the miss's siblings: rank 3 needs the larger tree to be reached
# (its 0.0625 ranks below the other positions' second candidates, 0.05 x ...).
@pytest.mark.parametrize(
    ("accept", "rank", "budget", "branches"),
    [("1", 1, 22, 4), ("4", 1, 22, 4), ("4", 3, 48, 6), ("8.5", 2, 32, 3), ("2", 0, 22, 4)],
)
def test_greedy_tree_verify_is_autoregressive_decoding(
    spawn: Any,
    native: Any,
    exact_model: Path,  # noqa: F811
    reference: Any,
    accept: str,
    rank: int,
    budget: int,
    branches: int,
) -> None:
    cases, outputs, transcripts = reference
    daemon = spawn(
        native.binary("qwen35"),
        exact_model,
        f"--draft-oracle={transcripts}",
        f"--oracle-accept={accept}",
        f"--oracle-rank={rank}",
        f"--draft-tree={budget}",
        f"--draft-tree-branches={branches}",
        "--n-ctx=512",
        ONE_THREAD,
        *EXACT,
    )
    daemon.ready()
    stats = run_all(daemon, cases, outputs)
    _, _, chain_accepted = oracle_schedule(float(accept), N_GEN)
    accepted = int(stats["draft_accepted"])
    if rank == 0:
        # The scheduled miss is not among the candidates: the tree finds what the chain
        # does, never less (its first branch is the chain's first proposals).
        assert accepted >= N_PROMPTS * chain_accepted
    else:
        # The truth at the miss is a candidate within the budget: the walk goes past it.
        assert accepted > N_PROMPTS * chain_accepted
    assert daemon.quit() == 0


def test_tree_verify_with_the_draft_is_autoregressive_decoding(
    spawn: Any,
    native: Any,
    exact_model: Path,  # noqa: F811
    test_models: dict[str, Path],
    reference: Any,
) -> None:
    """The DFlash draft's top candidates per position build the tree (random weights:
    nothing is accepted, but every step decodes several branches and keeps one)."""
    cases, outputs, _ = reference
    daemon = spawn(
        native.binary("qwen35"),
        exact_model,
        f"--draft={test_models['dflash']}",
        "--draft-tree=12",
        "--draft-tree-branches=4",
        "--n-ctx=512",
        ONE_THREAD,
        *EXACT,
    )
    daemon.ready()
    stats = run_all(daemon, cases, outputs)
    # At most the budget per step (fewer where the request's end leaves less room).
    assert 0 < int(stats["draft_proposed"]) <= 12 * int(stats["draft_steps"])
    assert daemon.quit() == 0


_CANDIDATE_CHECK = re.compile(
    r"candidate_check backend=(\S+) width=(\d+) rows=(\d+) rows_equal=(\d+) max_logprob_diff=(\S+)"
)


@pytest.mark.parametrize("width", [1, 8, 16])
def test_the_device_candidates_are_the_hosts(native: Any, width: int) -> None:
    """The draft's candidates come from its backend's sampling graph
    (native/src/engine/candidate_sampler.h): the same ids in the same order as the host
    computes from the same logits rows of the 27B vocabulary, the same log-probabilities
    to float rounding (measured: 4.8e-7 on the CPU backend)."""
    done = subprocess.run([str(native.mkmodels), "--candidate-check", str(width)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    check = _CANDIDATE_CHECK.fullmatch(done.stdout.strip())
    assert check is not None, done.stdout
    assert int(check[2]) == width and int(check[3]) == 15
    assert int(check[4]) == 15, check[0]
    assert float(check[5]) < 1e-4, check[0]


def test_rollback_after_a_tree_is_exact(
    spawn: Any,
    native: Any,
    exact_model: Path,  # noqa: F811
    reference: Any,
) -> None:
    """After tree steps, a snapshot of the live sequence and a restore from it continue
    exactly as a fresh autoregressive run of the same tokens does."""
    cases, outputs, transcripts = reference
    prompt, expected = cases[0], outputs[0]
    ar = spawn(native.binary("qwen35"), exact_model, "--n-ctx=512", ONE_THREAD, *EXACT)
    ar.ready()
    daemon = spawn(
        native.binary("qwen35"),
        exact_model,
        f"--draft-oracle={transcripts}",
        "--oracle-accept=4",
        "--oracle-rank=1",
        "--draft-tree=22",
        "--draft-tree-branches=4",
        "--n-ctx=512",
        "--slots=2",
        ONE_THREAD,
        *EXACT,
    )
    daemon.ready()
    tokens, _ = daemon.stream_command(f"generate {ids(prompt)} {N_GEN} ignore_eos=1")
    assert tokens == expected
    snap = daemon.ok(daemon.command("snapshot 0"), "snapshot")
    assert snap["n_tokens"] == str(len(prompt) + N_GEN - 1)
    longer = ar.stream_command(f"generate {ids(prompt + expected)} 12 ignore_eos=1")[0]
    assert daemon.stream_command(f"restore 0 {ids(prompt + expected)} 12 ignore_eos=1")[0] == longer
    # And the state a tree step left behind serves the next request as a fresh one would.
    assert daemon.stream_command(f"generate {ids(prompt)} {N_GEN} ignore_eos=1")[0] == expected
    assert ar.quit() == 0 and daemon.quit() == 0


def test_park_sent_mid_tree_waits_for_the_generation_and_the_tree_runs_after(
    spawn: Any, native: Any, test_models: dict[str, Path]
) -> None:
    """``park`` read while tree steps run waits for the generation (PROTOCOL.md 9.3),
    which ends whole and unchanged; the branch sequences are gone when the context is
    freed, and after ``unpark`` the same request takes tree steps to the same tokens.
    (Cancel mid-tree: test_dflash.py, test_cancel_mid_generation_with_a_draft[tree].)"""
    daemon = spawn(
        native.binary("qwen35"),
        test_models["qwen35"],
        f"--draft={test_models['dflash']}",
        "--draft-tree=22",
        "--draft-tree-branches=4",
        "--n-ctx=2048",
        ONE_THREAD,
    )
    daemon.ready()
    line = "generate ids:9707,1879,11,358 96 ignore_eos=1"
    expected, reply = daemon.stream_command(line)
    assert int(daemon.ok(reply, "generate")["tree_steps"]) > 0
    daemon.send(line)
    first = daemon.read_value()  # it is running
    daemon.send("park")
    rest = daemon.read_stream()
    reply = daemon.ok(daemon.readline(), "generate")
    assert [first, *rest] == expected and reply["finish"] == "length"
    assert int(reply["tree_steps"]) > 0
    parked = daemon.ok(daemon.readline(), "park")
    assert (parked["target"], parked["draft"]) == ("parked", "parked")
    assert daemon.ok(daemon.command("unpark"), "unpark")["target"] == "ready"
    tokens, reply = daemon.stream_command(line)
    assert tokens == expected and int(daemon.ok(reply, "generate")["tree_steps"]) > 0
    assert daemon.quit() == 0


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--draft-tree=8"], "--draft-tree needs --draft or --draft-oracle"),
        (["--draft-tree-branches=4"], "--draft-tree-branches only applies with --draft-tree"),
        (["--oracle-rank=1"], "--oracle-rank only applies with --draft-oracle"),
        (["--draft-tree=8", "--parallel=2", "DRAFT"], "--draft-tree runs with --parallel 1"),
        (["--draft-tree=8", "--kv-unified=off", "DRAFT"], "--draft-tree needs the one KV pool"),
        (["--draft-tree-branches=17", "--draft-tree=8", "DRAFT"], "is not an integer in [1, 16]"),
    ],
)
def test_tree_flags_are_checked(
    spawn: Any, native: Any, test_models: dict[str, Path], flags: list[str], needle: str
) -> None:
    argv = [f"--draft={test_models['dflash']}" if flag == "DRAFT" else flag for flag in flags]
    daemon = spawn(native.binary("qwen35"), test_models["qwen35"], *argv)
    line = daemon.readline()
    assert daemon.err(line) == "bad_flag" and needle in line, line
    assert daemon.wait() != 0
