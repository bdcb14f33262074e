"""DFlash through the server (``lucerna serve --draft``): lossless, reported, resumable.

The native tests (tests/native/test_dflash.py) prove the daemon's speculative decoding
is autoregressive decoding under greedy sampling; these prove the orchestrator drives
it on every request, reports it in ``usage``, and keeps it across a resumed stream. Both
servers run in the deterministic mode (``--deterministic``): there a verify block and an
autoregressive step, and a resumed stream's re-prefill and the uninterrupted decode, are
bit for bit the same, so equal text is guaranteed rather than the luck of no near-tie.
The random-weight test models accept few proposals, which is fine: what is tested is
that the output does not change, not how fast it comes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemons.native import NativeBuild
from orchestrator.config import Overrides, apply_overrides, build_models, load_config
from orchestrator.errors import ConfigError
from tests.conftest import LucernaServer, openai_chunks
from tests.native.test_dflash import oracle_schedule

MODEL = "qwen35"
PROMPTS = ["lamp " * 12, "the keeper repaired the brass lens near the north pier", "1, 2, 3,"]
MAX_TOKENS = 32


def serve(log: Path, target: Path, *extra: str) -> LucernaServer:
    server = LucernaServer(log, "--model", str(target), "--n-ctx", "512", "--threads", "1",
                           "--deterministic", *extra)
    server.wait_healthy()
    return server


@pytest.fixture(scope="module")
def servers(
    native: NativeBuild, test_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LucernaServer, LucernaServer]]:
    """The qwen35 test model twice: autoregressive, and with the DFlash test draft."""
    logs = tmp_path_factory.mktemp("speculative")
    plain = serve(logs / "plain.log", test_models["qwen35"])
    try:
        drafted = serve(logs / "drafted.log", test_models["qwen35"],
                        "--draft", str(test_models["dflash"]))
        try:
            yield plain, drafted
        finally:
            drafted.stop()
    finally:
        plain.stop()


def complete(server: LucernaServer, prompt: str) -> dict[str, Any]:
    response = httpx.post(f"{server.base_url}/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def stream(server: LucernaServer, prompt: str, kill_after: int | None = None,
           ) -> tuple[str, dict[str, Any]]:
    """Stream a completion; optionally SIGKILL the daemon after ``kill_after`` chunks."""
    pid = httpx.get(f"{server.base_url}/health").json()["models"][MODEL]["pid"]
    text: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream("POST", f"{server.base_url}/v1/completions", timeout=120, json={
            "model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}) as response:
        for chunk in openai_chunks(response):
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk["choices"]:
                text.append(chunk["choices"][0]["text"])
                if kill_after is not None and len(text) == kill_after:
                    os.kill(pid, signal.SIGKILL)
    return "".join(text), usage


@pytest.mark.slow
def test_greedy_answers_with_a_draft_equal_autoregressive_ones_and_report_it(
    servers: tuple[LucernaServer, LucernaServer],
) -> None:
    plain, drafted = servers
    for server in servers:  # the mode the equality rests on (module docstring)
        assert httpx.get(f"{server.base_url}/props").json()["deterministic"] is True
    for prompt in PROMPTS:
        expected, got = complete(plain, prompt), complete(drafted, prompt)
        assert got["choices"][0]["text"] == expected["choices"][0]["text"]
        assert got["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"]
        assert "speculative" not in expected["usage"]
        spec = got["usage"]["speculative"]
        # The daemon's own counts, as its schedule (PROTOCOL.md 5.9) makes them for this
        # many tokens: the random draft is never right here, so a verify step per token
        # but the first and the last, each proposing all the block the rest allows.
        steps, proposed, accepted = oracle_schedule(1.0, got["usage"]["completion_tokens"])
        assert (spec["draft_steps"], spec["proposed"], spec["accepted"]) == (
            steps, proposed, accepted), spec
        assert spec["acceptance_length"] == 1.0


@pytest.mark.slow
def test_a_stream_resumed_after_a_daemon_kill_still_speculates_and_is_unchanged(
    servers: tuple[LucernaServer, LucernaServer],
) -> None:
    _, drafted = servers
    uninterrupted, _ = stream(drafted, PROMPTS[0])
    resumed, usage = stream(drafted, PROMPTS[0], kill_after=4)
    assert resumed == uninterrupted
    assert usage["speculative"]["draft_steps"] > 0  # the restarted daemon drafted too
    assert "resuming on the restarted daemon" in drafted.log()


@pytest.mark.slow
def test_logprobs_with_a_draft_are_the_autoregressive_ones(
    servers: tuple[LucernaServer, LucernaServer],
) -> None:
    """Identical, greedy or sampled: a request for logprobs is decoded without proposals
    (PROTOCOL.md 5.9), since on this F16 model a verify row and a single-token step
    round differently (up to 1.35e-3 measured before that rule)."""
    plain, drafted = servers
    for prompt in PROMPTS:
        for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 3}):
            got = []
            for server in (plain, drafted):
                response = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=120,
                                      json={"model": MODEL,
                                            "messages": [{"role": "user", "content": prompt}],
                                            "max_tokens": 16, "logprobs": True,
                                            "top_logprobs": 3, **sampling})
                assert response.status_code == 200, response.text
                got.append(response.json()["choices"][0]["logprobs"]["content"])
            assert got[1] == got[0]


def echo_stream(server: LucernaServer, kill_after: int | None = None) -> list[dict[str, Any]]:
    """Stream an echo with logprobs; SIGKILL the daemon after ``kill_after`` chunks."""
    pid = httpx.get(f"{server.base_url}/health").json()["models"][MODEL]["pid"]
    blocks: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{server.base_url}/v1/completions", timeout=120, json={
            "model": MODEL, "prompt": PROMPTS[1], "max_tokens": MAX_TOKENS, "temperature": 0,
            "echo": True, "logprobs": 2, "stream": True}) as response:
        for chunk in openai_chunks(response):
            if chunk["choices"] and chunk["choices"][0]["logprobs"]:
                blocks.append(chunk["choices"][0]["logprobs"])
                if kill_after is not None and len(blocks) == kill_after:
                    os.kill(pid, signal.SIGKILL)
    return blocks


@pytest.mark.slow
def test_an_echo_resumed_after_a_daemon_kill_scores_the_prompt_once(
    servers: tuple[LucernaServer, LucernaServer],
) -> None:
    """The prompt's entries come once, in the echo chunk; the restarted daemon resumes
    the completion without scoring the prompt again (same tokens; the first value after
    the resume comes from a prefill row, so to the engine's batch rounding)."""
    _, drafted = servers
    whole = echo_stream(drafted)
    resumed = echo_stream(drafted, kill_after=2)
    assert "resuming on the restarted daemon" in drafted.log()
    assert resumed[0] == whole[0]  # the echo chunk: every prompt token's entry
    tokens = [[t for b in blocks[1:] for t in b["tokens"]] for blocks in (whole, resumed)]
    assert tokens[1] == tokens[0] and len(tokens[0]) == MAX_TOKENS
    values = [[v for b in blocks[1:] for v in b["token_logprobs"]] for blocks in (whole, resumed)]
    assert values[1] == pytest.approx(values[0], abs=1e-2)


def test_draft_tree_reaches_the_daemon_and_is_checked(
        native: NativeBuild, test_models: dict[str, Path], tmp_path: Path) -> None:
    """``draft_tree`` and ``draft_tree_branches`` (and ``--draft-tree``) become the
    daemon's flags; without a draft, branches without a tree, or with several sequences
    the config is refused with what to change."""
    config = tmp_path / "lucerna.toml"
    model = f'[[models]]\nname = "a"\npath = "{test_models["qwen35"]}"\n'
    draft = f'draft = "{test_models["dflash"]}"\n'
    config.write_text(model + draft + "draft_tree = 22\ndraft_tree_branches = 4\n")
    (served,) = build_models(load_config(config), native)
    argv = served.launch.daemon_argv(None)
    assert "--draft-tree=22" in argv and "--draft-tree-branches=4" in argv
    assert served.launch.parallel is None  # one sequence, as with any draft by default
    config.write_text(model + draft)
    (served,) = build_models(apply_overrides(load_config(config), Overrides(draft_tree=12)), native)
    assert "--draft-tree=12" in served.launch.daemon_argv(None)
    (served,) = build_models(load_config(config), native)
    assert not any(arg.startswith("--draft-tree") for arg in served.launch.daemon_argv(None))
    for text, problem in (
        (model + "draft_tree = 22\n", "draft_tree = 22 without a draft"),
        (model + draft + "draft_tree_branches = 4\n", "draft_tree_branches is set without"),
        (model + draft + "draft_tree = 22\nparallel = 2\n", "parallel = 2 with draft_tree"),
        (model + draft + "draft_tree = 1009\n", "draft_tree"),
        (model + draft + "draft_tree = 22\ndraft_tree_branches = 17\n", "draft_tree_branches"),
    ):
        config.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            build_models(load_config(config), native)


@pytest.mark.slow
def test_tree_verify_through_the_server_is_reported_and_unchanged(
    servers: tuple[LucernaServer, LucernaServer], test_models: dict[str, Path], tmp_path: Path,
) -> None:
    """``--draft-tree``: the same text as autoregressive decoding; ``/props`` says the
    draft's proposals are verified as trees, ``usage`` how many steps were."""
    plain, drafted = servers
    assert httpx.get(f"{drafted.base_url}/props").json()["speculation"]["verify"] == "chain"
    tree = serve(tmp_path / "tree.log", test_models["qwen35"],
                 "--draft", str(test_models["dflash"]), "--draft-tree", "12")
    try:
        speculation = httpx.get(f"{tree.base_url}/props").json()["speculation"]
        assert speculation["verify"] == "tree"
        assert speculation["tree"] == {"budget": 12, "branches": 8}  # the daemon's default
        for prompt in PROMPTS:
            expected, got = complete(plain, prompt), complete(tree, prompt)
            assert got["choices"][0]["text"] == expected["choices"][0]["text"]
            spec = got["usage"]["speculative"]
            assert spec["method"] == "dflash"
            assert 0 < spec["tree_steps"] <= spec["draft_steps"]
            assert "tree_steps" not in complete(drafted, prompt)["usage"]["speculative"]
    finally:
        tree.stop()
