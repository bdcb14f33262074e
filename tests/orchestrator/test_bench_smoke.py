"""The CI smoke run of every benchmark scenario: the real command, real servers, tiny limits.

Each test runs ``lucerna bench <scenario>`` as a user would, with a few tokens and one
repeat, on the small embedded models (SmolLM2-135M, gemma3-270m as the PFlash drafter)
and, where a scenario needs a qwen35 target or a DFlash draft, the random-weight test
models; then reads its ``--out`` document and checks that the harness works end to end:

- every request succeeded, and the peer is llama-server built from the *pristine*
  pinned tree, started with the scenario's declared flags for each arm;
- the cold-phase invariant: no cold request of either server reported a cached token
  beyond the run's fixed head, which is zero for completions on these models (no BOS);
- the warm phase's expectation: every warm request of both servers read from its cache;
- every comparison of the cold phase has a ratio (the fairness rules did not refuse it);
  where a scenario speculates, both servers' requests carry an acceptance length (the
  peer's speculative flags took effect).

No timing is asserted. The peer is a multi-minute build from source, done once:
``bin/lucerna test`` builds it during setup; the fixture builds it when a bare pytest
run finds it missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemons.paths import repo_root
from daemons.peer import PeerBuild, ensure_llama_server
from orchestrator.bench.record import FORMAT
from orchestrator.bench.scenarios import Options, scenario_named

# The speed of these runs is the machine's business; only a hang fails them.
_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def pristine_peer() -> PeerBuild:
    return ensure_llama_server(progress=lambda message: None)


def bench(scenario: str, tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / f"{scenario}.json"
    result = subprocess.run(
        # One thread: on a busy machine (CI runs suites side by side) a thread of two that
        # another process preempts stalls every layer's barrier, and a 135M model's
        # 300-token prefill then takes seconds instead of a fraction of one.
        [sys.executable, "-m", "orchestrator.cli", "bench", scenario, "--repeats", "1",
         "--threads", "1", "--out", str(out), "--logs", str(tmp_path / "logs"), *flags],
        cwd=repo_root(), capture_output=True, text=True, timeout=_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"## {scenario} v" in result.stdout
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["_stdout"] = result.stdout
    return doc


def arms_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {arm["label"]: arm for arm in doc["arms"]}


def check_run(doc: dict[str, Any], options: Options, peer: PeerBuild,
              completions_head: bool = True) -> None:
    """What every scenario's run must show (the module docstring's list)."""
    scenario = scenario_named(doc["scenario"]["name"])
    assert doc["format"] == FORMAT and doc["scenario"]["version"] == scenario.version
    assert doc["commit"]["sha"] and doc["machine"]["card"] and doc["run_id"]
    # Each arm ran with its declared flags, after the shared settings; the peer is the
    # pristine build (no patches), and its --parallel is ours.
    declared = {arm.label: arm for arm in scenario.arms(options) if not arm.optional}
    ran = arms_of(doc)
    ours_parallel = None
    for label, arm in ran.items():
        name = label.replace("llama-server", "peer", 1)
        assert name in declared, label
        assert arm["flags"] == list(declared[name].flags), label
        if arm["side"] == "peer":
            assert arm["peer"]["variant"] == "pristine" and arm["peer"]["patches"] == []
            assert arm["argv"][0] == str(peer.server)
        if arm["side"] != "daemon" and arm["flags"]:
            assert arm["argv"][-len(arm["flags"]):] == arm["flags"], label
        if arm["side"] in ("peer", "lucerna"):
            parallel = arm["argv"][arm["argv"].index("--parallel") + 1]
            ours_parallel = ours_parallel or parallel
            assert parallel == ours_parallel, label
            # Prompt caches on, as their users run them.
            argv = arm["argv"]
            assert "--no-cache-prompt" not in argv
            assert "--cache-ram" not in argv or argv[argv.index("--cache-ram") + 1] != "0"
    assert {arm["side"] for arm in ran.values()} >= {"lucerna", "peer"}
    requests = doc["requests"]
    assert requests and all(r["ok"] for r in requests), [r["error"] for r in requests]
    head = doc["head_tokens"]
    if completions_head:
        assert head == 0  # no BOS on these models: nothing comes before the salt
    phases = {p["name"]: p for p in doc["scenario"]["phases"]}
    for r in requests:
        assert r["cached_tokens"] is not None, r
        if not phases[r["phase"]]["expects_cache"]:
            assert r["cached_tokens"] <= head, r  # the cold-phase invariant
        else:
            assert r["cached_tokens"] > head, r  # the warm phase read from its cache
    assert doc["summary"]["cold_violations"] == [] and doc["summary"]["warm_misses"] == []
    cold_rows = [row for row in doc["summary"]["comparisons"]
                 if not phases.get(row["phase"], {"expects_cache": True})["expects_cache"]]
    assert cold_rows
    for row in cold_rows:
        assert row["refused"] is None and row["ratio"] is not None and row["ratio"] > 0, row
    for group in doc["summary"]["groups"]:
        assert group["failed"] == 0 and group["ttft_s"]["n"] >= 1, group
    assert "Cold invariant held" in doc["_stdout"]


def options(model: Path, **fields: Any) -> Options:
    return Options(model=model, repeats=1, **fields)


@pytest.mark.slow
def test_smoke_decode(pristine_peer: PeerBuild, chat_model: Path, tmp_path: Path) -> None:
    doc = bench("decode", tmp_path, "--model", "default-chat", "--prompts", "1",
                "--max-tokens", "4")
    check_run(doc, options(chat_model), pristine_peer)
    assert {r["phase"] for r in doc["requests"]} == {"cold", "warm"}


@pytest.mark.slow
def test_smoke_streams(pristine_peer: PeerBuild, chat_model: Path, tmp_path: Path) -> None:
    doc = bench("streams", tmp_path, "--model", "default-chat", "--levels", "1,2",
                "--max-tokens", "4")
    check_run(doc, options(chat_model, levels=(1, 2)), pristine_peer)
    sizes = {(r["arm"], r["level"]): r["completion_tokens"] for r in doc["rounds"]}
    assert {level for _, level in sizes} == {1, 2}
    for row in doc["rounds"]:
        sent = [r for r in doc["requests"] if r["arm"] == row["arm"]
                and r["round"] == row["index"]]
        assert len(sent) == row["level"]


@pytest.mark.slow
def test_smoke_agent(pristine_peer: PeerBuild, test_models: dict[str, Path],
                     tmp_path: Path) -> None:
    """Two turns on the qwen35 test model (a 4K-token prefill in seconds where SmolLM2
    takes many; its recurrent state is restored from checkpoints, the hard case)."""
    model = test_models["qwen35"]
    doc = bench("agent", tmp_path, "--model", str(model), "--prompts", "2",
                "--max-tokens", "4", "--n-ctx", "5120")
    check_run(doc, options(model, prompts=2), pristine_peer, completions_head=False)
    # The chat template's opening is all any two conversations share.
    assert 0 < doc["head_tokens"] < 16
    rows = {(row["metric"], row["phase"]) for row in doc["summary"]["comparisons"]}
    assert {("ttft_sum_s", "all"), ("ttft_sum_s", "warm"), ("ttft_s", "cold")} <= rows


@pytest.mark.slow
def test_smoke_edit(pristine_peer: PeerBuild, chat_model: Path, tmp_path: Path) -> None:
    doc = bench("edit", tmp_path, "--model", "default-chat", "--prompts", "1",
                "--scale", "0.1", "--max-tokens", "16")
    check_run(doc, options(chat_model, scale=0.1), pristine_peer)
    assert set(arms_of(doc)) == {"ours-lookup", "ours", "llama-server-ngram-mod"}
    speculating = [r for r in doc["requests"] if r["arm"] != "ours"]
    assert all(r["acceptance_length"] is not None for r in speculating), speculating


@pytest.mark.slow
def test_smoke_long_context(pristine_peer: PeerBuild, chat_model: Path,
                            tmp_path: Path) -> None:
    """One size (the scale brings every size down to the smallest, 200 tokens), PFlash's
    drafter the embedded gemma3-270m."""
    doc = bench("long-context", tmp_path, "--model", "default-chat", "--scale", "0.001",
                "--max-tokens", "4")
    check_run(doc, options(chat_model, scale=0.001), pristine_peer, completions_head=False)
    assert [p["name"] for p in doc["scenario"]["phases"]] == ["cold-200"]
    pflash = arms_of(doc)["ours-pflash"]["argv"]
    assert pflash[pflash.index("--prefill-compression") + 1] == "always"


@pytest.mark.slow
def test_smoke_speculative(pristine_peer: PeerBuild, test_models: dict[str, Path],
                           tmp_path: Path) -> None:
    target, draft = test_models["qwen35"], test_models["dflash"]
    doc = bench("speculative", tmp_path, "--model", str(target), "--draft", str(draft),
                "--acceptance", "4", "--prompts", "1", "--max-tokens", "8")
    check_run(doc, options(target, draft=draft, draft_block=16, acceptances=(4.0,)),
              pristine_peer)
    ran = arms_of(doc)
    oracle = ran["daemon-oracle-a4"]["argv"]
    assert "--oracle-accept=4" in oracle and any(a.startswith("--draft-oracle=")
                                                  for a in oracle)
    speculating = ("ours-dflash", "llama-server-dflash", "daemon-oracle-a4",
                   "llama-server-synth-a4")
    for r in doc["requests"]:
        assert (r["acceptance_length"] is not None) == (r["arm"] in speculating), r

