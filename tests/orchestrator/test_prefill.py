"""PFlash in the server: the keep-ratio curve, the text round trip (alignment, word
repair, the last message's survival), settings and flags, and, live on the default
model as both drafter and target, auto mode compressing a long prompt: usage says how
much was cut and the answer still finds the needle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from daemons.client import open_daemon
from daemons.native import NativeBuild
from daemons.paths import repo_root
from daemons.roles import DaemonLaunch, role_named
from orchestrator.config import Overrides, apply_overrides, load_config, parse_config
from orchestrator.errors import BadRequestError, ConfigError
from orchestrator.events import Conversation, GenerationRequest
from orchestrator.niah import haystack_messages, needle_found, synthetic_filler
from orchestrator.prefill import (
    KEEP_HEADER,
    MODE_HEADER,
    CompressOptions,
    KeepRatioCurve,
    PrefillCompressor,
    PrefillOverrides,
    PrefillSettings,
    compress_conversation,
)
from orchestrator.prefill._proxy import upstream_body
from orchestrator.prefill._roundtrip import (
    Span,
    align_kept,
    kept_runs,
    repair_word_cuts,
    restore_query,
    runs_text,
)
from orchestrator.tools import FunctionTool, JsonCallParser, ToolChoice, plan_output
from protocol import SamplingParams
from tests.conftest import LucernaServer
from tests.orchestrator.conftest import (
    NEEDLE_VALUE,
    PREFILL_KEEP,
    PREFILL_THRESHOLD,
    long_messages,
)

# --- the keep-ratio curve ----------------------------------------------------------------


def test_curve_interpolates_linearly_and_is_flat_outside() -> None:
    curve = KeepRatioCurve.parse("2048:0.5 8192:0.2, 32768:0.1")
    assert curve.ratio(0) == curve.ratio(2048) == 0.5
    assert curve.ratio(5120) == pytest.approx(0.35)
    assert curve.ratio(8192) == pytest.approx(0.2)
    assert curve.ratio(20480) == pytest.approx(0.15)
    assert curve.ratio(10**6) == 0.1
    assert curve.keep_x1000(5120) == 350
    assert str(curve) == "2048:0.5 8192:0.2 32768:0.1"
    flat = KeepRatioCurve.parse("0.05")
    assert flat == KeepRatioCurve.flat(0.05) and flat.ratio(123456) == 0.05 and str(flat) == "0.05"
    assert KeepRatioCurve.flat(0.0001).keep_x1000(10) == 1  # compress takes 1..1000


@pytest.mark.parametrize("text", ["", "0", "1.5", "abc", "2048:0.5 1024:0.2", "2048", "1:0.5 1:0.6",
                                  "2048:x", "-5:0.5"])
def test_curve_refuses_malformed_text(text: str) -> None:
    with pytest.raises(ValueError):
        KeepRatioCurve.parse(text)


# --- alignment, repair, survival -------------------------------------------------------------


def test_alignment_recovers_whole_chunks_including_a_short_last_one() -> None:
    source = list(range(100, 110))  # chunks of 4: [0..3] [4..7] [8, 9]
    mask = align_kept(source, [100, 101, 102, 103, 108, 109], chunk=4)
    assert mask is not None and list(mask) == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1]
    # Identical chunks: the earliest fitting one; the text is the same either way.
    source = [1, 2, 1, 2, 1, 2, 9]
    mask = align_kept(source, [1, 2, 1, 2, 9], chunk=2)
    assert mask is not None and list(mask) == [1, 1, 1, 1, 0, 0, 1]
    # Not whole chunks: greedy subsequence matching instead.
    mask = align_kept([5, 6, 7, 8], [5, 7], chunk=2)
    assert mask is not None and list(mask) == [1, 0, 1, 0]
    assert align_kept([5, 6, 7], [7, 5], chunk=2) is None


# A tiny piece table: a number split into digits, a word split in two, a two-byte letter,
# a contraction, a decimal number.
PIECES = [b" The", b" number", b" is", b" ", b"7", b"3", b"4", b"1", b".", b" fl", b"ower",
          b"\n", b" caf", b"\xc3", b"\xa9", b" town", b"'", b"s", b" pi", b" 3", b".", b"14",
          b".", b" done"]


def test_repair_finishes_words_cut_at_run_boundaries() -> None:
    ids = list(range(len(PIECES)))
    span = Span(0, len(ids))
    mask = bytearray(len(ids))
    mask[0:6] = b"\x01" * 6  # " The number is 73" -- the number cut after "3"
    mask[10] = 1  # "ower" without its " fl"
    mask[12] = 1  # " caf" without the two bytes of "é"
    mask[15] = 1  # " town" without "'s"
    mask[18:20] = b"\x01" * 2  # " pi 3" without ".14"
    added = repair_word_cuts(mask, span, ids, PIECES, max_tokens=8)
    assert added == 9
    text = runs_text(kept_runs(mask, span), ids, PIECES)
    # The period after 7341 and after 3.14 ends a sentence: not part of the word.
    assert text == " The number is 7341 flower\n café town's pi 3.14"
    # Without repair the needle would reach the target as "73".
    unrepaired = bytearray(len(ids))
    unrepaired[0:6] = b"\x01" * 6
    assert "7341" not in runs_text(kept_runs(unrepaired, span), ids, PIECES)


def test_repair_is_bounded_and_stays_in_its_span() -> None:
    ids = [4, 5, 6, 7, 4, 5, 6, 7]  # "73417341", one long word
    mask = bytearray(8)
    mask[3] = 1
    assert repair_word_cuts(mask, Span(2, 6), ids, PIECES, max_tokens=1) == 2
    assert list(mask) == [0, 0, 1, 1, 1, 0, 0, 0]


def test_last_message_survival_rule() -> None:
    mask = bytearray(100)
    mask[90:95] = b"\x01" * 5
    assert restore_query(mask, Span(90, 100), ratio=0.8, max_tokens=50, tail_tokens=4) == "whole"
    assert all(mask[90:100]) and not any(mask[:90])
    mask = bytearray(100)
    mask[0:85] = b"\x01" * 85  # kept more than four fifths: left alone
    assert restore_query(mask, Span(0, 100), ratio=0.8, max_tokens=50, tail_tokens=4) is None
    mask = bytearray(100)  # too long to re-append whole: only its tail comes back
    assert restore_query(mask, Span(0, 100), ratio=0.8, max_tokens=50, tail_tokens=4) == "tail"
    assert list(mask[96:]) == [1, 1, 1, 1] and not any(mask[:96])


# --- settings, flags, headers, the upstream request ---------------------------------------------


def test_prefill_table_and_flags(tmp_path: Path) -> None:
    config = parse_config({"models": [{"name": "m", "path": "default", "prefill": {
        "mode": "always", "curve": "1024:0.5 4096:0.1", "park_target": True, "n_ctx": 8192,
        "chunk": 16}}]}, base_dir=tmp_path)
    prefill = config.models[0].prefill
    assert prefill is not None and prefill.mode == "always" and prefill.park_target
    assert prefill.curve.ratio(2560) == pytest.approx(0.3) and prefill.options.chunk == 16
    assert prefill.drafter is None and prefill.upstream is None
    flags = Overrides(prefill=PrefillOverrides(keep=0.2, park_target=False, threshold=100))
    overridden = apply_overrides(config, flags).models[0].prefill
    assert overridden is not None and overridden.curve == KeepRatioCurve.flat(0.2)
    assert not overridden.park_target and overridden.threshold == 100 and overridden.n_ctx == 8192
    # A flag gives a model without a table the defaults.
    plain = apply_overrides(None, Overrides(prefill=PrefillOverrides(mode="auto")))
    assert plain.models[0].prefill == PrefillSettings()
    proxy = apply_overrides(None, Overrides(prefill=PrefillOverrides(
        upstream="http://h:1/v1", upstream_model="big", upstream_key_env="k")))
    upstream = proxy.models[0].prefill.upstream  # type: ignore[union-attr]
    assert upstream is not None and (upstream.url, upstream.model, upstream.key) == (
        "http://h:1/v1", "big", "k")


def test_the_examples_prefill_table_is_valid_once_uncommented(tmp_path: Path) -> None:
    text = (repo_root() / "configs" / "lucerna.toml").read_text()
    head, _, tail = text.partition("# [models.prefill]")
    block = tail.split("\n\n")[0]
    uncommented = "[models.prefill]" + "\n".join(line[2:] for line in block.splitlines())
    path = tmp_path / "lucerna.toml"
    path.write_text(head + uncommented + "\n")
    gemma = load_config(path).models[1]  # the example's prefill table follows gemma3-270m
    prefill = gemma.prefill
    assert gemma.name == "gemma3-270m"
    assert prefill is not None and prefill.mode == "auto" and prefill.n_ctx == 131072
    assert prefill.upstream is not None and prefill.upstream.model == "qwen3.6-27b"


@pytest.mark.parametrize(("table", "names"), [
    ({"mode": "sometimes"}, "mode"),
    ({"keep": 0.1, "curve": "100:0.5"}, "curve"),
    ({"curve": "100:0.5 50:0.2"}, "curve"),
    ({"keep": 1.5}, "keep"),
    ({"upstream_key": "k"}, "upstream"),
    ({"upstream": "gpu-box:8080"}, "upstream"),
    ({"park_target": "yes"}, "park_target"),
    ({"drafter": "missing.gguf"}, "drafter"),
    ({"keeep": 0.1}, "keeep"),
])
def test_prefill_table_mistakes_name_the_key(table: dict[str, object], names: str,
                                             tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"models": [{"name": "m", "path": "default", "prefill": table}]},
                     source="lucerna.toml", base_dir=tmp_path)
    assert f"models[0] (m).prefill.{names}:" in str(refused.value)


def test_flag_mistakes() -> None:
    for flags in (PrefillOverrides(keep=0.1, curve="1:0.5"), PrefillOverrides(keep=2.0),
                  PrefillOverrides(upstream_model="x"), PrefillOverrides(upstream="ftp://x"),
                  PrefillOverrides(threshold=-1), PrefillOverrides(drafter="/no/such.gguf")):
        with pytest.raises(ConfigError, match="--prefill"):
            flags.apply(None)


def test_request_headers_adjust_the_policy() -> None:
    compressor = PrefillCompressor("m", PrefillSettings(mode="auto"), None)
    assert compressor.policy({}) == ("auto", KeepRatioCurve.flat(0.05))
    mode, curve = compressor.policy({MODE_HEADER: "always", KEEP_HEADER: "100:0.5 200:0.25"})
    assert mode == "always" and curve.ratio(150) == pytest.approx(0.375)
    for headers in ({MODE_HEADER: "maybe"}, {KEEP_HEADER: "lots"}):
        with pytest.raises(BadRequestError, match="x-lucerna-prefill"):
            compressor.policy(headers)


def test_upstream_request_carries_tools_choice_and_sampling() -> None:
    tool = FunctionTool("get_weather", None, {"type": "object", "properties": {}})
    forced = plan_output([tool], ToolChoice("function", "get_weather"))
    messages = ({"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Sunny"})
    request = GenerationRequest(
        [1, 2, 3], 32, SamplingParams(temp=0.7, top_k=40, seed=3), ("END",),
        json_schema=forced.json_schema, parser_factory=forced.parser_factory,
        conversation=Conversation(messages, tuple(forced.template_tools or ())))
    assert request.parser_factory is JsonCallParser
    body = upstream_body(request, "big")
    assert body["model"] == "big" and body["stream"] and body["max_tokens"] == 32
    assert body["messages"][0] == {"role": "user", "content": "Hi"}
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "response_format" not in body
    assert (body["temperature"], body["top_k"], body["seed"], body["stop"]) == (0.7, 40, 3,
                                                                                ["END"])
    schema = plan_output([], ToolChoice(), {"type": "object"})
    plain = upstream_body(GenerationRequest([1], None, None, json_schema=schema.json_schema,
                                            conversation=Conversation(messages[:1])), "big")
    assert plain["temperature"] == 0.0 and "tools" not in plain and "max_tokens" not in plain
    assert plain["response_format"]["json_schema"]["schema"] == {"type": "object"}


# --- live: the round trip through real drafters -------------------------------------------------

TRICKY = ("Ünïcödé café, naïve: 3.14159 and 4729105; def f(x):\n    return x ** 2  # ok\n"
          "https://example.com/a?b=c — «quotes» 日本語テキスト 🙂")


def words(text: str) -> set[str]:
    """Words without the punctuation that may end them (a cut may drop a final period)."""
    return {word.rstrip(".,;:!?") for word in text.split()}


def pflash(native: NativeBuild, model: Path) -> DaemonLaunch:
    return DaemonLaunch(role=role_named("pflash"), executable=native.binary("pflash"),
                        model=model, n_ctx=4096, threads=1)


@pytest.mark.slow
async def test_text_round_trips_through_either_drafter_vocabulary(
        native: NativeBuild, default_model: Path, test_models: dict[str, Path]) -> None:
    filler = synthetic_filler()
    messages = [*haystack_messages(filler, 40, 0.5, NEEDLE_VALUE),
                {"role": "assistant", "content": TRICKY}, {"role": "user", "content": TRICKY}]
    for model in (default_model, test_models["qwen3"]):  # Gemma's vocabulary, Qwen's
        async with open_daemon(pflash(native, model)) as drafter:
            pieces = await drafter.piece_table()
            whole = await compress_conversation(drafter, pieces, messages, 1000,
                                                CompressOptions())
            assert whole.messages == messages and whole.requeried is None
            cut = await compress_conversation(drafter, pieces, messages, 300, CompressOptions())
            assert cut.n_kept < 0.5 * cut.n_content
            # Runs are cut at word edges, so every word that reaches the target is one of
            # the original's: nothing half-cut, whatever the drafter's tokenizer.
            original = words(" ".join(m["content"] for m in messages))
            for message in cut.messages:
                assert words(message["content"]) <= original, message["content"]
            # The question at the end lost more than a fifth: it came back whole.
            assert cut.messages[-1] == messages[-1]
            again = await compress_conversation(drafter, pieces, messages, 300, CompressOptions())
            assert again.messages == cut.messages  # deterministic


@pytest.mark.slow
async def test_the_target_is_parked_exactly_while_the_drafter_scores(
        native: NativeBuild, test_models: dict[str, Path]) -> None:
    target_launch = DaemonLaunch(role=role_named("qwen35"), executable=native.binary("qwen35"),
                                 model=test_models["qwen3"], n_ctx=1024, threads=1)
    async with open_daemon(target_launch) as target, open_daemon(
            pflash(native, test_models["qwen3"])) as drafter:
        pieces = await drafter.piece_table()
        await drafter.park("all")  # as the server leaves it after loading
        steps: list[str] = []

        def record(name: str, method: Any) -> Any:
            async def recorded(*args: Any, **kwargs: Any) -> Any:
                steps.append(name)
                return await method(*args, **kwargs)
            return recorded

        target.park = record("park target", target.park)  # type: ignore[method-assign]
        target.unpark = record("unpark target", target.unpark)  # type: ignore[method-assign]
        drafter.park = record("park drafter", drafter.park)  # type: ignore[method-assign]
        drafter.unpark = record("unpark drafter", drafter.unpark)  # type: ignore[method-assign]
        drafter.compress = record("compress", drafter.compress)  # type: ignore[method-assign]
        messages = haystack_messages(synthetic_filler(), 30, 0.5, NEEDLE_VALUE)
        await compress_conversation(drafter, pieces, messages, 300, CompressOptions(),
                                    target=target, park_target=True)
        assert steps == ["park target", "unpark drafter", "compress", "park drafter",
                         "unpark target"]
        assert (await target.stats())["parked"] == "0"
        assert (await drafter.stats())["parked"] == "1"
        # The flag off (memory allows both): the drafter stays loaded, nothing moves.
        await drafter.unpark("all")
        steps.clear()
        await compress_conversation(drafter, pieces, messages, 300, CompressOptions(),
                                    target=target, park_target=False)
        assert steps == ["compress"]


# --- live: auto mode on the default model -------------------------------------------------------


def client(server: LucernaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.mark.slow
def test_auto_mode_compresses_a_long_prompt_and_says_so(prefill_server: LucernaServer) -> None:
    api = client(prefill_server)
    messages = long_messages()
    counted = httpx.post(f"{prefill_server.base_url}/v1/messages/count_tokens", timeout=60, json={
        "model": "gemma3-270m", "messages": messages[1:], "system": messages[0]["content"]})
    full_tokens = counted.json()["input_tokens"]
    assert full_tokens >= PREFILL_THRESHOLD
    response = api.chat.completions.create(
        model="gemma3-270m", messages=long_messages(), max_tokens=12, temperature=0)  # type: ignore[arg-type]
    usage = response.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    compressed = usage.prompt_tokens_details.model_extra["compressed_tokens"]  # type: ignore[index]
    assert usage.prompt_tokens + compressed == full_tokens
    # The kept share is the keep ratio, plus the fixed template text and the question
    # (re-appended whole when the cut reached it), plus whole words.
    assert usage.prompt_tokens < (PREFILL_KEEP + 0.1) * full_tokens
    answer = response.choices[0].message.content or ""
    assert needle_found(answer, NEEDLE_VALUE), answer
    assert "prompt" in prefill_server.log() and "-> " in prefill_server.log()


@pytest.mark.slow
def test_the_same_long_prompt_again_skips_compression_and_prefill(
        prefill_server: LucernaServer) -> None:
    """The exact prefill cache: keyed on the raw prompt, a hit skips the drafter, and the
    compressed prompt's state comes back from the prefix cache whole."""
    api = client(prefill_server)
    messages = long_messages()
    messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']} (exact cache)"}
    first, second = (api.chat.completions.create(
        model="gemma3-270m", messages=messages, max_tokens=8, temperature=0)  # type: ignore[arg-type]
        for _ in range(2))
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.usage is not None and second.usage is not None
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    details = second.usage.prompt_tokens_details
    assert details is not None and details.model_extra["compressed_tokens"] > 0  # type: ignore[index]
    assert details.cached_tokens == second.usage.prompt_tokens
    assert prefill_server.log().count("from the exact prefill cache") >= 1


@pytest.mark.slow
def test_short_prompts_stay_whole_and_streams_report_the_cut(
        prefill_server: LucernaServer) -> None:
    api = client(prefill_server)
    short = api.chat.completions.create(
        model="gemma3-270m", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
        temperature=0)
    assert short.usage is not None and short.usage.prompt_tokens_details is not None
    assert "compressed_tokens" not in (short.usage.prompt_tokens_details.model_extra or {})
    # Streaming, the Responses dialect: the usage of its final event has the cut.
    events = []
    with httpx.stream("POST", f"{prefill_server.base_url}/v1/responses", timeout=300, json={
            "model": "gemma3-270m", "input": long_messages(), "max_output_tokens": 4,
            "temperature": 0, "stream": True}) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    usage = events[-1]["response"]["usage"]
    assert events[-1]["type"] == "response.incomplete"  # cut by max_output_tokens
    assert usage["input_tokens_details"]["compressed_tokens"] > usage["input_tokens"] > 0


def daemon_rss(server: LucernaServer, executable: str) -> int:
    """Resident memory of the server's daemon started from ``executable``."""
    children = psutil.Process(server.process.pid).children(recursive=True)
    found = [c for c in children if Path(c.cmdline()[0]).name == executable]
    assert len(found) == 1, [c.cmdline() for c in children]
    return int(found[0].memory_info().rss)


@pytest.mark.slow
def test_with_park_the_server_wakes_the_drafter_and_restores_the_target(
        native: NativeBuild, default_model: Path, tmp_path: Path) -> None:
    server = LucernaServer(tmp_path / "serve.log", "--model", "default", "--n-ctx", "2048",
                           "--prefill-compression", "auto",
                           "--prefill-threshold", str(PREFILL_THRESHOLD),
                           "--prefill-keep", str(PREFILL_KEEP), "--prefill-park")
    try:
        server.wait_healthy()
        assert "target parked while it scores" in server.log()
        api = client(server)
        for _ in range(2):
            response = api.chat.completions.create(
                model="gemma3-270m", messages=long_messages(), max_tokens=12, temperature=0)  # type: ignore[arg-type]
            # The drafter sleeps parked between requests: it scored, so it was woken ...
            details = response.usage.prompt_tokens_details  # type: ignore[union-attr]
            assert details is not None and details.model_extra["compressed_tokens"] > 0  # type: ignore[index]
            # ... and the target, parked while it scored, answered, so it was restored.
            answer = response.choices[0].message.content or ""
            assert needle_found(answer, NEEDLE_VALUE), answer
            # Between requests the drafter holds almost nothing; the target its weights.
            drafter, target = daemon_rss(server, "lucerna-pflash"), daemon_rss(
                server, "lucerna-qwen35")
            assert drafter < 0.5 * target, (drafter, target)
    finally:
        server.stop()
