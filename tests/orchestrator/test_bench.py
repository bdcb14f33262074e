"""``lucerna bench``: its statistics, prompt sets and reports, and the CI smoke run.

Benchmarks are not tests: nothing here checks a speed. The smoke test runs the
real command against the session's real server on one tiny case and checks that
every figure is present and sane; the rest checks the arithmetic on made-up
instants, where the right answer is known.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemons.client import open_daemon
from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.bench.cli import cmd_bench
from orchestrator.bench.client import Endpoint, request_body, speculative_figures
from orchestrator.bench.direct import daemon_launch
from orchestrator.bench.interference import InterferenceMeter
from orchestrator.bench.prompts import (
    LONG_TARGETS,
    SET_NAMES,
    code_prompts,
    long_context_prompt,
    prompt_set,
)
from orchestrator.bench.report import bench_document, markdown_tables
from orchestrator.bench.runner import CaseRun, ProbeRecord, requests_for
from orchestrator.bench.stats import RequestTiming, percentile, summarize
from tests.conftest import LucernaServer

# --- statistics -----------------------------------------------------------------------


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0
    assert percentile(values, 99) == pytest.approx(99.01)
    with pytest.raises(ValueError):
        percentile(values, 101)


def timing(sent: float, outputs: list[float], done: float, completion: int,
           prompt_id: str = "p", prompt_tokens: int = 10) -> RequestTiming:
    return RequestTiming(prompt_id=prompt_id, t_sent=sent, output_times=outputs, t_done=done,
                         prompt_tokens=prompt_tokens, completion_tokens=completion)


def test_request_figures_follow_the_stated_rules() -> None:
    t = timing(10.0, [10.5, 10.6, 10.8, 11.1], 11.2, completion=4)
    assert t.ok
    assert t.ttft_s == pytest.approx(0.5)
    assert t.itl_s == pytest.approx([0.1, 0.2, 0.3])
    # Three tokens decoded after the first, over the 0.6 s between first and last.
    assert t.decode_tps == pytest.approx(3 / 0.6)
    assert t.e2e_s == pytest.approx(1.2)
    # Fewer content deltas than tokens (text held back, merged): tokens still count.
    merged = timing(0.0, [1.0, 2.0], 2.5, completion=9)
    assert merged.decode_tps == pytest.approx(8.0)


def test_requests_without_a_decode_span_have_no_rate() -> None:
    assert timing(0.0, [1.0], 1.0, completion=1).decode_tps is None
    assert timing(0.0, [1.0, 1.0], 1.0, completion=2).decode_tps is None
    failed = RequestTiming("p", t_sent=0.0, error="HTTP 503: busy")
    assert not failed.ok and failed.ttft_s is None and failed.e2e_s is None


def test_concurrent_requests_come_in_full_rounds_of_the_workers() -> None:
    prompts = code_prompts()
    assert len(prompts) == 10  # the figures below are for the code set as it is
    # 20 requests for 8 workers would leave 4 idle for the last round: 24.
    assert [len(requests_for(prompts, 2, n)) for n in (1, 4, 8, 16, 32)] == [20, 20, 24, 32, 32]
    eight = requests_for(prompts, 2, 8)
    assert [p.id for p in eight] == [prompts[i % 10].id for i in range(24)]


def test_summary_pools_intervals_and_leaves_failures_out() -> None:
    runs = [
        timing(0.0, [1.0, 1.1, 1.2], 1.3, completion=3),
        timing(0.0, [2.0, 2.3, 2.6], 2.7, completion=3),
        RequestTiming("p", t_sent=0.0, error="HTTP 503: busy"),
    ]
    s = summarize(runs, wall_s=3.0)
    assert (s.requests, s.failed) == (3, 1)
    assert s.ttft_p50_s == pytest.approx(1.5)
    assert s.itl_p50_s == pytest.approx(0.2)  # pooled: 0.1, 0.1, 0.3, 0.3
    assert s.decode_tps_p50 == pytest.approx((2 / 0.2 + 2 / 0.6) / 2)
    assert s.throughput_tps == pytest.approx(6 / 3.0)
    assert s.completion_tokens_mean == 3 and s.acceptance_length_mean is None


def test_speculative_figures_from_either_server() -> None:
    lucerna = {"prompt_tokens": 5, "completion_tokens": 40,
               "speculative": {"acceptance_length": 2.5, "draft_steps": 16, "accepted": 24,
                               "proposed": 48}}
    length, raw = speculative_figures(lucerna, None, 40)
    assert length == 2.5 and raw is not None and raw["accepted"] == 24
    # llama-server: 30 of 40 tokens came from accepted drafts, so 10 target steps.
    length, raw = speculative_figures({"completion_tokens": 40}, {"draft_n": 45,
                                                           "draft_n_accepted": 30}, 40)
    assert length == pytest.approx(4.0) and raw == {"draft_n": 45, "draft_n_accepted": 30}
    assert speculative_figures({"completion_tokens": 40}, {"predicted_n": 40}, 40) == (None, None)


def test_request_body_is_greedy_streaming_with_usage() -> None:
    prompt = code_prompts()[0]
    endpoint = Endpoint("peer", "http://x/v1", model="m", extra_body={"cache_prompt": False})
    body = request_body(endpoint, prompt, "completions", 32)
    assert body["prompt"] == prompt.text and body["temperature"] == 0
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m" and body["max_tokens"] == 32 and body["cache_prompt"] is False
    chat = request_body(Endpoint("x", "http://x/v1"), prompt, "chat", 32)
    assert chat["messages"] == [{"role": "user", "content": prompt.text}]
    assert "model" not in chat
    assert endpoint.root_url == "http://x"


# --- reports --------------------------------------------------------------------------


def case(target: str, tps_gap: float, ttft: float,
         others: tuple[float, ...] = (0.0, 0.0, 0.0)) -> CaseRun:
    timings = [timing(0.0, [ttft + i * tps_gap for i in range(5)], ttft + 5 * tps_gap, 5,
                      prompt_id=f"p{i}") for i in range(3)]
    for t, share in zip(timings, others, strict=True):
        t.text = f"out-{t.prompt_id}"
        t.interference = share
    return CaseRun(target, "code", 1, timings)


def test_report_has_every_run_and_ratios_of_candidate_over_baseline() -> None:
    runs = [case("lucerna", 0.01, 0.2), case("llama-server", 0.02, 0.1, (0.0, 0.5, 0.02))]
    runs.append(CaseRun("lucerna", "code", 8, runs[0].timings, wall_s=2.0,
                        probe=ProbeRecord([0.001, 0.002, 0.004], {"200": 3},
                                          [(0.0, 100 << 20), (1.0, 120 << 20)])))
    doc = bench_document(runs, targets=[{"label": "lucerna"}, {"label": "llama-server"}],
                         settings={"max_tokens": 5}, started=0.0)
    json.dumps(doc)  # serializable as it stands
    assert [r["target"] for r in doc["runs"]] == ["lucerna", "llama-server", "lucerna"]
    (ratio,) = doc["ratios"]  # concurrency 8 has no baseline run to compare with
    assert ratio["set"] == "code" and ratio["concurrency"] == 1
    assert ratio["ratios"]["decode_tps_p50"] == pytest.approx(2.0)
    assert ratio["ratios"]["ttft_p50_s"] == pytest.approx(2.0)
    assert ratio["ttft_p50_added_s"] == pytest.approx(0.1)
    assert ratio["paired"]["pairs"] == 3 and ratio["paired"]["quiet_pairs"] == 2
    assert ratio["paired"]["quiet_ttft_s_ratio_p50"] == pytest.approx(2.0)
    assert ratio["paired"]["decode_tps_ratio_p50"] == pytest.approx(2.0)
    assert ratio["same_output"] == 1.0
    probe = doc["runs"][2]["probe"]
    assert probe["rss_max_bytes"] == 120 << 20 and probe["health_p99_s"] == pytest.approx(
        0.00396)
    table = markdown_tables(doc)
    assert "| lucerna | code | 1 | 3/3 | 200.0 |" in table
    assert "lucerna / llama-server" in table and "| code | 1 | 2.000 | 2.000 |" in table
    assert "| 120 |" in table  # RSS max in MiB


def test_concurrent_runs_have_ratios_but_no_pairs() -> None:
    # Concurrent runs come one target after the other, their requests in finishing
    # order: the i-th requests of the two did not run side by side.
    a, b = case("lucerna", 0.01, 0.2), case("llama-server", 0.02, 0.1)
    runs = [CaseRun(r.target, "code", 8, r.timings, wall_s=2.0) for r in (a, b)]
    doc = bench_document(runs, targets=[{"label": "lucerna"}, {"label": "llama-server"}],
                         settings={}, started=0.0)
    (ratio,) = doc["ratios"]
    assert ratio["paired"] is None and ratio["ratios"]["throughput_tps"] == pytest.approx(1.0)
    assert "| code | 8 | 2.000 |" in markdown_tables(doc)


def test_interference_is_a_share_of_the_machine() -> None:
    meter = InterferenceMeter([None])
    meter.start()
    sum(range(200_000))  # our own CPU use does not count
    share = meter.stop()
    assert share is not None and 0.0 <= share <= 1.0


# --- prompt sets ----------------------------------------------------------------------


def test_code_set_is_ten_distinct_function_prompts() -> None:
    prompts = code_prompts()
    assert len(prompts) == 10 and len({p.id for p in prompts}) == 10
    for p in prompts:
        assert f"def {p.id}(" in p.text and p.text.rstrip().endswith('"""'), p.id
    assert prompt_set("code").prompts == prompts and set(SET_NAMES) >= {"code", *LONG_TARGETS}


def test_long_context_prompts_are_deterministic() -> None:
    a = long_context_prompt(4000)
    assert a == long_context_prompt(4000)
    assert a != long_context_prompt(4000, seed="other")
    assert "amber falcon 42" in a and a.endswith("Answer:")
    (only,) = prompt_set("long-16k").prompts
    assert only.id == "long-16k" and prompt_set("long-16k").n_ctx == 16_384
    with pytest.raises(ValueError):
        prompt_set("long-1k")


@pytest.mark.slow
async def test_long_context_prompts_hit_their_token_targets(
    native: NativeBuild, default_model: Path,
) -> None:
    # Tokenizing is all it takes (no prefill), so even 64K is quick.
    launch = daemon_launch(default_model, native, n_ctx=512, threads=1)
    async with open_daemon(launch) as client:
        for name, (target, n_ctx) in LONG_TARGETS.items():
            (prompt,) = prompt_set(name).prompts
            n = len(await client.tokenize(prompt.text, special=True))
            assert abs(n - target) <= 0.03 * target, (name, n)
            assert n + 128 <= n_ctx, name


# --- the command ----------------------------------------------------------------------


def test_command_line_mistakes_are_named() -> None:
    from orchestrator.cli import build_parser

    parser = build_parser()
    for argv, words in ((["bench"], "either --url"),
                        (["bench", "--model", "x.gguf"], "--against"),
                        (["bench", "--url", "http://x/v1", "--max-tokens", "0"], ">= 1")):
        with pytest.raises(SystemExit, match=words):
            cmd_bench(parser.parse_args(argv))
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--url", "http://x/v1", "--set", "code,nope"])


@pytest.mark.slow
def test_smoke_one_tiny_case_against_a_real_server(server: LucernaServer, tmp_path: Path) -> None:
    """The CI smoke: the real command, one prompt, 4 tokens, once alone and twice at once."""
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "bench", "--url", f"{server.base_url}/v1",
         "--label", "lucerna", "--pid", str(server.process.pid), "--limit", "1",
         "--max-tokens", "4", "--concurrency", "1,2", "--out", str(out)],
        cwd=repo_root(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "| lucerna | code | 1 | 1/1 |" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["targets"][0]["url"] == f"{server.base_url}/v1"
    sequential, concurrent = doc["runs"]
    assert (sequential["concurrency"], concurrent["concurrency"]) == (1, 2)
    for run in (sequential, concurrent):
        s = run["summary"]
        assert s["failed"] == 0 and s["requests"] == run["concurrency"]
        assert 0 < s["ttft_p50_s"] <= s["e2e_p50_s"] < 60
        assert s["decode_tps_p50"] > 0 and s["itl_p50_s"] >= 0
        assert s["prompt_tokens_mean"] > 10 and 1 <= s["completion_tokens_mean"] <= 4
        for request in run["requests"]:
            assert request["ok"] and request["prompt_id"] == "running_max"
            assert request["finish_reason"] in ("length", "stop")
    probe = concurrent["probe"]
    assert probe["probes"] >= 1 and set(probe["statuses"]) == {"200"}
    assert 0 < probe["health_p99_s"] < 10
    assert probe["rss_max_bytes"] > 50 << 20  # the front end and its daemon
    assert concurrent["summary"]["throughput_tps"] > 0
