"""``lucerna bench <scenario>``: the declarations, salts, fairness rules and reports.

Benchmarks are not tests: nothing here checks a speed. These tests check the harness's
own logic on made-up records, where the right answer is known; the smoke run of every
scenario against real servers is tests/orchestrator/test_bench_smoke.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from daemons.engine import ENGINE_PIN, engine_root
from daemons.peer import PeerBuild, peer_build
from orchestrator.bench.arms import ArmPlan, _argv
from orchestrator.bench.fairness import cold_violations, refusal, warm_misses
from orchestrator.bench.outcome import compare, groups
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.record import FORMAT, new_run_id, write_document
from orchestrator.bench.salt import SaltBook, salted
from orchestrator.bench.scenario_cli import list_text
from orchestrator.bench.scenario_run import plan_arms, plan_comparisons
from orchestrator.bench.scenarios import (
    COLD,
    SCENARIOS,
    WARM,
    Comparison,
    Options,
    scenario_named,
)
from orchestrator.bench.scenarios.edit import NGRAM_TYPES, PEER_BEST_NGRAM
from orchestrator.bench.schedule import RequestRecord, RoundRecord
from orchestrator.bench.servers import ServerSettings

DRAFT = Path("/models/dflash.gguf")
OPTIONS = Options(model=Path("/models/m.gguf"), draft=DRAFT, draft_block=16, repeats=2,
                  prompts=2, levels=(1, 2), acceptances=(4.0,), scale=0.01)


def pristine() -> PeerBuild:
    return peer_build("cpu", variant="pristine")


# --- the declarations -----------------------------------------------------------------


def test_the_six_scenarios_exist_and_each_arm_says_why() -> None:
    assert [s.name for s in SCENARIOS] == ["decode", "streams", "agent", "edit",
                                           "long-context", "speculative"]
    for scenario in SCENARIOS:
        arms = scenario.arms(OPTIONS)
        labels = [arm.label for arm in arms]
        assert len(set(labels)) == len(labels), scenario.name
        assert {arm.side for arm in arms} >= {"lucerna", "peer"}, scenario.name
        assert all(arm.why for arm in arms), scenario.name
        assert scenario.version >= 1 and scenario.measures and scenario.workload
        for comparison in scenario.comparisons(OPTIONS):
            assert {comparison.candidate, *comparison.baseline} <= set(labels)
            names = {p.name for p in scenario.phases(OPTIONS)} | {"all"}
            assert set(comparison.phases) <= names, (scenario.name, comparison)
    with pytest.raises(ValueError, match="choose from decode"):
        scenario_named("nope")


def test_list_names_every_scenario_and_every_peer_flag() -> None:
    text = list_text()
    for scenario in SCENARIOS:
        assert f"{scenario.name} (v{scenario.version}): {scenario.measures}" in text
    assert "peer-ngram-mod: llama-server --spec-type ngram-mod" in text
    assert ("peer-dflash: llama-server --spec-type draft-dflash -md <draft.gguf> "
            "--spec-draft-n-max 15") in text
    assert "--spec-synth-len 4" in text and "--oracle-accept 4" in text
    assert "--swa-full --fit off" in text  # the shared settings, derived from servers.py


def peer_argv(scenario_name: str, label: str, options: Options = OPTIONS) -> list[str]:
    scenario = scenario_named(scenario_name)
    plans = {p.label: p for p in plan_arms(scenario, options, [pristine()], ("all",))}
    sizing = scenario.sizing(options)
    settings = ServerSettings(options.model, sizing.n_ctx, 2, parallel=sizing.parallel)
    return _argv(plans[label], settings, 1234, "bench")


def test_the_peer_runs_at_its_best_in_every_scenario() -> None:
    for scenario in SCENARIOS:
        for plan in plan_arms(scenario, OPTIONS, [pristine()], ("all",)):
            if plan.arm.side != "peer":
                continue
            argv = peer_argv(scenario.name, plan.label)
            assert argv[0] == str(pristine().server)
            # Its prompt cache stays on: no switch of the ad hoc --no-cache mode.
            assert "--no-cache-prompt" not in argv and "--cache-ram" not in argv
            # --parallel equal to ours: the shared settings' value.
            assert argv[argv.index("--parallel") + 1] == str(
                scenario.sizing(OPTIONS).parallel)
            assert argv[-len(plan.arm.flags):] == list(plan.arm.flags) or not plan.arm.flags
    streams = peer_argv("streams", "llama-server")
    assert streams[streams.index("--parallel") + 1] == "2" and "--kv-unified" in streams
    edit = peer_argv("edit", f"llama-server-{PEER_BEST_NGRAM}")
    assert edit[-2:] == ["--spec-type", "ngram-mod"]
    dflash = peer_argv("speculative", "llama-server-dflash")
    assert dflash[-6:] == ["--spec-type", "draft-dflash", "-md", str(DRAFT),
                           "--spec-draft-n-max", "15"]
    synth = peer_argv("speculative", "llama-server-synth-a4")
    assert synth[-8:-2] == dflash[-6:] and synth[-2:] == ["--spec-synth-len", "4"]


def test_arms_are_planned_per_peer_build_and_comparisons_follow() -> None:
    edit = scenario_named("edit")
    patched = peer_build("cpu", variant="patched")
    plans = plan_arms(edit, OPTIONS, [pristine(), patched], None)
    labels = [p.label for p in plans]
    # The default arms: lookup, plain, the peer's best n-gram type, once per build.
    assert labels == ["ours-lookup", "ours", "llama-server-ngram-mod",
                      "llama-server-patched-ngram-mod"]
    assert [p.peer.variant for p in plans if p.peer] == ["pristine", "patched"]
    comparisons = plan_comparisons(edit, OPTIONS, [pristine(), patched], plans)
    against_peer = [c for c in comparisons if c.metric == "decode_tps"
                    and c.baseline != ("ours",)]
    assert [c.baseline for c in against_peer] == [("llama-server-ngram-mod",),
                                                   ("llama-server-patched-ngram-mod",)]
    every = plan_arms(edit, OPTIONS, [pristine()], ("all",))
    assert {f"llama-server-{kind}" for kind in NGRAM_TYPES} <= {p.label for p in every}
    with pytest.raises(ValueError, match="has no arm nope"):
        plan_arms(edit, OPTIONS, [pristine()], ("nope",))


def test_the_pristine_and_patched_peers_build_apart() -> None:
    clean, patched = pristine(), peer_build("cpu", variant="patched")
    assert clean.build_dir == engine_root(ENGINE_PIN) / "build-cpu-peer"
    assert clean.patches == () and clean.describe()["patch_series"] == "none"
    assert clean.label == "llama-server" and patched.label == "llama-server-patched"
    assert patched.patches and patched.series.startswith("p")
    assert patched.build_dir.name == f"build-cpu-peer-{patched.series}"
    assert patched.describe()["sha256"] == ENGINE_PIN.sha256


# --- salts ----------------------------------------------------------------------------


def test_salts_open_with_a_token_no_other_salt_opens_with() -> None:
    # A stand-in vocabulary as coarse as can be: a word's first letter is its first
    # token (52 of them), so 40 salts drawn blindly would share some.
    vocabulary: dict[str, int] = {}

    async def first_token(text: str) -> int:
        return vocabulary.setdefault(text[0], len(vocabulary))

    keys = [f"r{i}" for i in range(20)]

    async def fill() -> SaltBook:
        book = SaltBook(7, first_token)
        await book.fill(["ours", "peer"], keys)
        return book

    book = trio.run(fill)
    salts = [book.salt(arm, key) for arm in ("ours", "peer") for key in keys]
    assert len({s[0] for s in salts}) == len(salts) == 40
    again = trio.run(fill)  # seeded: the same command sends the same prompts
    assert [again.salt(arm, key) for arm in ("ours", "peer") for key in keys] == salts
    with pytest.raises(KeyError, match="fill"):
        book.salt("ours", "r99")


def test_a_salt_opens_the_text_or_the_first_message() -> None:
    assert salted(Prompt("p", "def f():"), "Kavo-1a").text == "Kavo-1a\ndef f():"
    chat = salted(Prompt("c", "", (("system", "rules"), ("user", "hi"))), "Kavo-1a")
    assert chat.messages == (("system", "Kavo-1a\nrules"), ("user", "hi"))


def salt_for(arm: str) -> Callable[[str], str]:
    return lambda key: f"<{arm}:{key}>"


def test_every_cold_prompt_is_new_and_every_warm_one_is_its_arms_own_again() -> None:
    for scenario in SCENARIOS:
        rounds = {arm: scenario.rounds(OPTIONS, salt_for(arm)) for arm in ("a", "b")}
        shape = {arm: [[(r.key, r.phase, r.level) for r in rnd] for rnd in arm_rounds]
                 for arm, arm_rounds in rounds.items()}
        assert shape["a"] == shape["b"], scenario.name  # the same rounds, own salts
        warm = {p.name for p in scenario.phases(OPTIONS) if p.expects_cache}
        cold_prompts = []
        for arm, arm_rounds in rounds.items():
            seen: dict[str, Prompt] = {}
            for request in (r for rnd in arm_rounds for r in rnd):
                first = (request.prompt.messages[0][1] if request.prompt.messages
                         else request.prompt.text)
                assert first.startswith(f"<{arm}:"), (scenario.name, first[:40])
                if request.phase not in warm:
                    cold_prompts.append(request.prompt)
                    seen[request.key] = request.prompt
                elif request.key in seen:  # decode, edit: the same prompt again
                    assert request.prompt == seen[request.key], scenario.name
                else:  # agent: a later turn extends the conversation's first one
                    conversation = request.key.split(".")[0]
                    opening = seen[f"{conversation}.t1"].messages or ()
                    assert (request.prompt.messages or ())[:len(opening)] == opening
        assert len(set(cold_prompts)) == len(cold_prompts), scenario.name
    streams = scenario_named("streams").rounds(OPTIONS, lambda key: key)
    assert [len(r) for r in streams] == [1, 1, 2, 2]  # levels 1, 2; two repeats each
    assert {r.level for r in streams[2]} == {2}


# --- fairness and figures -------------------------------------------------------------


def record(arm: str, key: str, phase: str = "cold", cached: int | None = 0,
           ttft: float = 0.1, tps: float = 50.0, ok: bool = True, repeat: int = 1,
           round_: int = 0) -> RequestRecord:
    return RequestRecord(arm=arm, phase=phase, level=1, repeat=repeat, round=round_, key=key,
                         ok=ok, error=None if ok else "HTTP 503", prompt_tokens=100,
                         cached_tokens=cached, completion_tokens=8, ttft_s=ttft,
                         decode_tps=tps, e2e_s=ttft + 0.2, acceptance_length=None,
                         finish_reason="length")


def test_a_cold_request_read_from_a_cache_refuses_the_ratio() -> None:
    a = [record("ours", "k1"), record("ours", "k2")]
    b = [record("peer", "k1"), record("peer", "k2", cached=1)]
    # Up to the head (a BOS both share) is no cache read; beyond it is.
    assert refusal(COLD, False, 1, ("ours", a), ("peer", b)) is None
    reason = refusal(COLD, False, 0, ("ours", a), ("peer", b))
    assert reason is not None and "cold invariant is broken" in reason and "peer in 1" in reason
    assert cold_violations([*a, *b], [COLD], 0) == [b[1]]
    assert cold_violations([*a, *b], [COLD], 1) == []


def test_warm_ratios_stand_only_on_the_same_footing_outside_cache_scenarios() -> None:
    a = [record("ours", "k1", "warm", cached=90), record("ours", "k2", "warm", cached=90)]
    b = [record("peer", "k1", "warm", cached=90), record("peer", "k2", "warm", cached=0)]
    reason = refusal(WARM, False, 0, ("ours", a), ("peer", b))
    assert reason is not None and "ours read from its cache in 2 of 2" in reason
    assert refusal(WARM, True, 0, ("ours", a), ("peer", b)) is None  # the agent: allowed
    assert warm_misses([*a, *b], [WARM], 0) == [b[1]]
    both = [record("peer", "k1", "warm", cached=90), record("peer", "k2", "warm", cached=80)]
    assert refusal(WARM, False, 0, ("ours", a), ("peer", both)) is None


def test_failed_or_silent_requests_refuse_the_ratio() -> None:
    good = [record("ours", "k1")]
    failed = refusal(COLD, False, 0, ("ours", good), ("peer", [record("peer", "k1",
                                                                      ok=False)]))
    assert failed is not None and "failed" in failed
    silent = refusal(COLD, False, 0, ("ours", good), ("peer", [record("peer", "k1",
                                                                      cached=None)]))
    assert silent is not None and "did not report" in silent


def test_ratios_are_of_medians_with_paired_spreads_and_the_best_baseline() -> None:
    ours = [record("ours", f"k{i}", tps=t) for i, t in enumerate((40.0, 50.0, 60.0))]
    slow = [record("peer-a", f"k{i}", tps=t) for i, t in enumerate((20.0, 25.0, 30.0))]
    fast = [record("peer-b", f"k{i}", tps=t) for i, t in enumerate((40.0, 25.0, 30.0))]
    comparison = Comparison("ours", ("peer-a", "peer-b"), "decode_tps", "x")
    (row,) = compare(comparison, [COLD], False, 0, [*ours, *slow, *fast], [])
    assert row["baseline"] == "peer-b" and row["refused"] is None
    assert row["ratio"] == pytest.approx(50.0 / 30.0)
    assert row["paired"] == {"n": 3, "min": pytest.approx(1.0), "median": 2.0, "max": 2.0}
    sums = Comparison("ours", ("peer-a",), "ttft_sum_s", "x", ("all",))
    turns = [record("ours", "t1", ttft=1.0), record("ours", "t2", "warm", cached=50, ttft=0.2),
             record("peer-a", "t1", ttft=2.0), record("peer-a", "t2", "warm", ttft=1.0)]
    (total,) = compare(sums, [COLD, WARM], True, 0, turns, [])
    assert total["ratio"] == pytest.approx(1.2 / 3.0)
    rounds = [RoundRecord("ours", 0, "cold", 1, 1, 2.0, 100, 0.0),
              RoundRecord("ours", 1, "cold", 1, 2, 1.0, 100, 0.0)]
    (entry,) = groups(ours[:1], rounds)
    assert entry["aggregate_tps"] == {"n": 2, "min": 50.0, "median": 75.0, "max": 100.0}
    assert entry["decode_tps"]["median"] == 40.0 and entry["failed"] == 0


# --- the record -----------------------------------------------------------------------


def test_the_record_is_one_compact_line_with_a_run_id(tmp_path: Path) -> None:
    run_id = new_run_id("decode")
    assert re.fullmatch(r"\d{8}T\d{6}Z-decode-[0-9a-f]{6}", run_id)
    path = tmp_path / "run.json"
    write_document({"format": FORMAT, "run_id": run_id, "x": [1.5]}, path)
    text = path.read_text()
    assert text.count("\n") == 1 and ", " not in text and json.loads(text)["x"] == [1.5]


def test_planning_a_daemon_arm_needs_no_peer() -> None:
    plans = plan_arms(scenario_named("speculative"), OPTIONS, [pristine()], None)
    oracle = next(p for p in plans if p.label == "daemon-oracle-a4")
    assert oracle.peer is None and oracle.arm.oracle_accept == 4.0
    assert isinstance(oracle, ArmPlan)
