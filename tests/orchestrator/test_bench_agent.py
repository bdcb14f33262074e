"""``lucerna bench --set agent``: the conversation's shape, the cache flags, the per-turn
report, and a smoke run against a real server.

Benchmarks are not tests: nothing here checks a speed. The per-turn arithmetic is
checked on made-up instants, where the right answer is known.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from daemons.client import open_daemon
from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.bench.agent import AGENT_TURNS, WARMUP_MESSAGES, agent_conversation
from orchestrator.bench.cli import server_settings
from orchestrator.bench.client import Endpoint, cached_tokens, request_body
from orchestrator.bench.direct import daemon_launch
from orchestrator.bench.prompts import Prompt, prompt_set
from orchestrator.bench.report import bench_document, markdown_tables
from orchestrator.bench.runner import BenchPlan, run_bench
from orchestrator.bench.servers import (
    ServerSettings,
    llama_server_argv,
    llama_server_body,
    lucerna_argv,
)
from orchestrator.bench.stats import RequestTiming
from tests.conftest import LucernaServer

# --- the conversation -----------------------------------------------------------------


def test_each_turn_is_the_previous_history_plus_a_reply_and_a_result() -> None:
    turns = agent_conversation(1)
    assert len(turns) == AGENT_TURNS >= 8
    assert [role for role, _ in turns[0]] == ["system", "user"]
    for before, after in itertools.pairwise(turns):
        assert after[: len(before)] == before  # extends it exactly
        assert [role for role, _ in after[len(before):]] == ["assistant", "user"]
        assert "<tool_call>" in after[-2][1] and after[-1][1].startswith("<tool_result")
    sizes = [sum(len(text) for _, text in turn) for turn in turns]
    assert sizes == sorted(sizes) and sizes[-1] > 1.7 * sizes[0]
    system = turns[0][0][1]
    assert system.count('"parameters"') >= 12  # tool-heavy: JSON-schema definitions
    assert agent_conversation(1) == turns  # fixed text


def test_repeats_are_new_conversations_and_the_warmup_shares_nothing() -> None:
    one, two = agent_conversation(1), agent_conversation(2)
    first_line = one[0][0][1].split("\n", 1)
    assert two[0][0][1].split("\n", 1)[1] == first_line[1]  # the same work...
    assert two[0][0][1].split("\n", 1)[0] != first_line[0]  # ...under another session id
    assert one[-1][1:] == two[-1][1:]
    (warm,) = WARMUP_MESSAGES
    assert all(warm[1] not in text for _, text in one[-1])
    agent = prompt_set("agent")
    assert [p.id for p in agent.prompts] == [f"c1.t{i}" for i in range(1, AGENT_TURNS + 1)]
    assert agent.warmup_prompt.messages == WARMUP_MESSAGES
    assert agent.replay is not None and agent.replay(2)[0].id == "c2.t1"
    assert prompt_set("code").warmup_prompt == prompt_set("code").prompts[0]


def test_a_conversation_goes_to_chat_completions_as_its_messages() -> None:
    turn = prompt_set("agent").prompts[2]
    body = request_body(Endpoint("x", "http://x/v1"), turn, "completions", 8)
    assert "prompt" not in body
    assert [(m["role"], m["content"]) for m in body["messages"]] == list(turn.messages or ())
    usage = {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 7}}
    assert cached_tokens(usage, None) == 7
    assert cached_tokens({"prompt_tokens": 10}, {"cache_n": 3}) == 3
    assert cached_tokens({"prompt_tokens": 10}, None) is None


@pytest.mark.slow
async def test_the_conversation_grows_from_4k_to_8k_gemma3_tokens(
    native: NativeBuild, default_model: Path,
) -> None:
    launch = daemon_launch(default_model, native, n_ctx=512, threads=1)
    async with open_daemon(launch) as client:
        turns = agent_conversation(1)
        system = len(await client.tokenize(turns[0][0][1], special=False))
        last = len(await client.tokenize("\n".join(t for _, t in turns[-1]), special=False))
    assert 3_600 <= system <= 4_400, system
    assert 7_500 <= last <= 8_800, last
    assert last + 256 <= prompt_set("agent").n_ctx


# --- the runner -----------------------------------------------------------------------


class _Recorder:
    """A driver that answers at once and remembers what it was sent."""

    health_url = None
    pid = None

    def __init__(self, label: str) -> None:
        self.label = label
        self.sent: list[Prompt] = []

    async def run(self, prompt: Prompt, max_tokens: int) -> RequestTiming:
        self.sent.append(prompt)
        return RequestTiming(prompt.id, 0.0, [0.5], 1.0, prompt_tokens=100, completion_tokens=1)


def test_turns_run_in_order_once_per_repeat_and_never_concurrently() -> None:
    a, b = _Recorder("a"), _Recorder("b")
    plan = BenchPlan(sets=("agent",), repeats=2, limit=3, concurrency=(1, 4), max_tokens=4)
    runs = trio.run(run_bench, [a, b], plan)
    ids = ["c1.t1", "c1.t2", "c1.t3", "c2.t1", "c2.t2", "c2.t3"]
    assert [p.id for p in a.sent] == ["warm-up", *ids] == [p.id for p in b.sent]
    assert [(r.target, r.concurrency) for r in runs] == [("a", 1), ("b", 1)]


# --- the cache flags ------------------------------------------------------------------


def _settings(*flags: str) -> ServerSettings:
    from orchestrator.cli import build_parser

    args = build_parser().parse_args(["bench", "--model", "m.gguf", "--against",
                                      "llama-server", "--set", "agent", *flags])
    return server_settings(args, BenchPlan(sets=args.sets), Path("m.gguf"), 10_240)


def test_both_caches_are_on_by_default_and_no_cache_turns_both_off() -> None:
    on = _settings()
    peer = llama_server_argv(Path("llama-server"), on, 1, "m")
    ours = lucerna_argv(on, 2, "m")
    assert on.prompt_cache
    assert "--no-cache-prompt" not in peer and "--cache-ram" not in peer
    assert "--cache-ram" not in ours and llama_server_body(on) == {}

    off = _settings("--no-cache")
    peer = llama_server_argv(Path("llama-server"), off, 1, "m")
    ours = lucerna_argv(off, 2, "m")
    assert not off.prompt_cache
    assert "--no-cache-prompt" in peer and peer[peer.index("--cache-ram") + 1] == "0"
    assert ours[ours.index("--cache-ram") + 1] == "0"
    assert llama_server_body(off) == {"cache_prompt": False}


def test_spare_sequences_reach_lucerna_alone() -> None:
    assert "--spare-sequences" not in lucerna_argv(_settings(), 2, "m")
    spares = _settings("--parallel", "4", "--spare-sequences", "0")
    ours = lucerna_argv(spares, 2, "m")
    assert ours[ours.index("--spare-sequences") + 1] == "0"
    assert "--spare-sequences" not in llama_server_argv(Path("llama-server"), spares, 1, "m")


def test_cache_flags_need_servers_of_our_own() -> None:
    from orchestrator.bench.cli import cmd_bench
    from orchestrator.cli import build_parser

    parser = build_parser()
    for argv, words in ((["bench", "--url", "http://x/v1", "--no-cache"], "give --model"),
                        (["bench", "--model", "m", "--against", "daemon", "--set", "agent"],
                         "chat template")):
        with pytest.raises(SystemExit, match=words):
            cmd_bench(parser.parse_args(argv))


# --- the per-turn report --------------------------------------------------------------


def _turn(turn: int, ttft: float, prompt: int, cached: int) -> RequestTiming:
    return RequestTiming(f"c1.t{turn}", 0.0, [ttft, ttft + 0.1], ttft + 0.2,
                         prompt_tokens=prompt, completion_tokens=2, cached_tokens=cached)


def test_turn_figures_compare_each_turn_with_its_new_tokens_at_turn_1s_rate() -> None:
    from orchestrator.bench.runner import CaseRun

    # a: 1000 tokens/s cold; turn 2 has 200 new tokens (0.2 s at that rate) and took 0.3 s.
    a = CaseRun("a", "agent", 1, [_turn(1, 4.0, 4000, 0), _turn(2, 0.3, 4500, 4300)])
    b = CaseRun("b", "agent", 1, [_turn(1, 5.0, 4000, 0), _turn(2, 0.5, 4500, 4000)])
    for t in (*a.timings, *b.timings):
        t.interference = 0.0
    b.timings[1].interference = 0.5
    doc = bench_document([a, b], targets=[{"label": "a"}, {"label": "b"}], settings={},
                         started=0.0)
    json.dumps(doc)
    (conv,) = doc["conversations"]
    fa, fb = conv["targets"]["a"], conv["targets"]["b"]
    assert fa["cold_prefill_tps"] == pytest.approx(1000.0)
    one, two = fa["turns"]
    assert one["ttft_over_estimate"] is None  # turn 1 is the rate itself
    assert two["new_tokens"] == 200 and two["new_prefill_estimate_s"] == pytest.approx(0.2)
    assert two["ttft_over_estimate"] == pytest.approx(1.5)
    assert fb["turns"][1]["ttft_over_estimate"] == pytest.approx(0.5 / (500 / 800))
    assert fa["sum_ttft_s"] == pytest.approx(4.3) and fb["sum_ttft_s"] == pytest.approx(5.5)
    assert conv["sum_ttft_ratio"] == pytest.approx(4.3 / 5.5)
    assert conv["ttft_ratios"] == pytest.approx([0.8, 0.6])
    table = markdown_tables(doc)
    assert conv["quiet_turns"] == 1  # turn 2 of b was disturbed
    assert ("| 2 | 300 | 500 | 0.60 | 4500 / 4500 | 4300 / 4000 | 1.50 | 0.80 | 0 / 50 |"
            in table)
    assert conv["sum_ttft_after_turn_1_ratio"] == pytest.approx(0.6)
    assert ("Sum of TTFTs: a 4.30 s, b 5.50 s; a/b 0.782. Turns 2 on: a 0.30 s, b 0.50 s; "
            "0.600." in table)
    assert "an estimate" in table


# --- a real server --------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_two_agent_turns_against_a_real_server(test_models: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """The real command, the agent set's first two turns, 4 tokens each: the second turn
    finds the first one's prefix in the cache. On the qwen35 test model, whose 4K-token
    prefill takes a second or two where the default model's takes ten or more (and whose
    recurrent state the cache can only restore at checkpoints)."""
    server = LucernaServer(tmp_path / "serve.log", "--model", str(test_models["qwen35"]),
                           "--n-ctx", "5120", "--threads", "2")
    try:
        server.wait_healthy()
        out = tmp_path / "bench.json"
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "bench", "--url",
             f"{server.base_url}/v1", "--label", "lucerna", "--set", "agent", "--limit", "2",
             "--max-tokens", "4", "--out", str(out)],
            cwd=repo_root(), capture_output=True, text=True, timeout=120)
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    (run,) = doc["runs"]
    first, second = run["requests"]
    assert first["ok"] and second["ok"], (first["error"], second["error"])
    assert 3_000 < first["prompt_tokens"] < second["prompt_tokens"]
    assert second["cached_tokens"] >= first["prompt_tokens"] - 8
    (conv,) = doc["conversations"]
    turns = conv["targets"]["lucerna"]["turns"]
    assert turns[1]["ttft_over_estimate"] is not None
    assert "agent, conversation 1: per turn" in result.stdout
