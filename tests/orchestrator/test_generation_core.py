"""The generation core (orchestrator/generation.py ``generate_events``) on in-memory daemons.

The real ``Supervisor``, ``DaemonClient`` and generation stream run against
tests/fake_daemon, whose model is a function of the context, so an uninterrupted
greedy run is known exactly (``greedy``) and every rule of the core is checked in
milliseconds: resume after a death with no token lost or repeated, the poison rule,
the reasoning budget's close, logprobs, each finish reason, the cold fallback. What
only a real engine shows (a resumed stream's tokens under a real model, batch
rounding) stays in tests/orchestrator/test_supervision.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing

import pytest
import trio

from daemons.errors import DaemonReplyError
from orchestrator.errors import BadRequestError, ContextLengthError, ServiceUnavailableError
from orchestrator.events import (
    Event,
    Finished,
    GenerationRequest,
    PromptLogprobs,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
)
from orchestrator.generation import (
    MAX_RECOVERIES,
    chat_prompt,
    generate_events,
    prepare_generation,
    tokenize_text,
)
from orchestrator.models import ServedModel
from orchestrator.prefix_cache import CacheSettings
from orchestrator.reasoning import ReasoningFormat, ReasoningPlan
from orchestrator.tools import ToolCallParser
from protocol import Generate
from tests.fake_daemon import (
    DEFAULT_VOCAB,
    EOS,
    THINK_CLOSE,
    Behaviour,
    Death,
    FakeDaemons,
    NextToken,
    Refuse,
    Script,
    default_logprobs,
    install,
    letters,
    served_model,
    serving,
)

V = DEFAULT_VOCAB
PROMPT = V.ids("Count with me: ")


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    return install(monkeypatch)


def greedy(model: NextToken, prompt: Sequence[int], n: int) -> list[int]:
    """What an uninterrupted greedy run of ``model`` generates (before any EOS)."""
    out: list[int] = []
    while len(out) < n and (token := model([*prompt, *out])) != EOS:
        out.append(token)
    return out


def text_of(tokens: Sequence[int]) -> str:
    return V.render(tokens, special=False).decode()


async def run(model: ServedModel, request: GenerationRequest) -> list[Event]:
    async with aclosing(generate_events(model, request)) as events:
        return [event async for event in events]


def answer(events: Sequence[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def sent(lines: list[str]) -> list[str]:
    """The command lines a daemon read before the supervisor's ``quit``."""
    return lines[: lines.index("quit")] if "quit" in lines else lines


def words(lines: list[str]) -> list[str]:
    return [line.split(" ")[0] for line in sent(lines)]


def finished(events: Sequence[Event]) -> Finished:
    last = events[-1]
    assert isinstance(last, Finished)
    return last


# --- recovery --------------------------------------------------------------------------

async def test_a_death_mid_stream_resumes_with_no_token_lost_or_repeated(
    fakes: FakeDaemons,
) -> None:
    fakes.plan(Behaviour(deaths=(Death("generate", after_tokens=3),)))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=12))
        assert model.supervisor.crashes == 1
    expected = greedy(letters, PROMPT, 12)
    assert answer(events) == text_of(expected)
    assert finished(events).completion_tokens == 12 and finished(events).recoveries == 1
    first, second = fakes.of("model")
    assert [d.tokens for d in first.decoded] == []  # it died before its reply
    # The restarted daemon prefilled the prompt and the 3 tokens streamed, for the rest.
    resumed = second.decoded[-1]
    assert resumed.prompt == (*PROMPT, *expected[:3]) and len(resumed.tokens) == 9
    assert sent(second.lines)[-1] == (
        f"generate ids:{','.join(map(str, resumed.prompt))} 9 reuse=0")


async def test_a_death_before_any_token_retries_the_same_request(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(deaths=(Death("generate", after_tokens=0),)))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=5))
    assert answer(events) == text_of(greedy(letters, PROMPT, 5))
    assert finished(events).recoveries == 1
    assert [f.decoded[-1].prompt for f in fakes.of("model")[1:]] == [tuple(PROMPT)]


async def test_a_request_that_kills_its_daemon_every_time_is_refused(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """The poison rule: more than MAX_RECOVERIES deaths in a row with no token between
    end the request with a 503 that says so, instead of crash-looping the model."""
    fakes.defaults["model"] = Behaviour(deaths=(Death("generate", nth=None, after_tokens=0),))
    async with serving(served_model()) as model:
        with pytest.raises(ServiceUnavailableError,
                           match=f"died {MAX_RECOVERIES + 1} times in a row under this request"):
            await run(model, GenerationRequest(PROMPT, max_tokens=5))
    tried = [f for f in fakes.of("model") if "generate" in f.words]
    assert len(tried) == MAX_RECOVERIES + 1


async def test_deaths_with_tokens_between_them_never_poison_a_request(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """A daemon killed now and then (the OOM killer) costs the stream nothing, however
    many times: each death followed progress."""
    fakes.defaults["model"] = Behaviour(deaths=(Death("generate", after_tokens=2),))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=9))
    assert answer(events) == text_of(greedy(letters, PROMPT, 9))
    assert finished(events).recoveries == 4 > MAX_RECOVERIES


# --- finish reasons ------------------------------------------------------------------------

REPLY = V.ids("Hello there, friend.")


async def test_an_end_of_generation_token_is_a_stop(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(model=Script({tuple(PROMPT): REPLY}))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=100))
    assert answer(events) == "Hello there, friend."
    done = finished(events)
    assert done.finish_reason == "stop" and done.completion_tokens == len(REPLY)
    assert done.stop_string is None and not done.capped


async def test_the_request_limit_is_a_length(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(model=Script({tuple(PROMPT): REPLY}))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=5))
    assert answer(events) == "Hello" and finished(events).finish_reason == "length"
    (generate,) = [c for c in fakes.latest().commands if isinstance(c, Generate)]
    assert generate.n_gen == 5


async def test_a_stop_string_ends_the_text_and_the_daemons_generation(
    fakes: FakeDaemons,
) -> None:
    fakes.defaults["model"] = Behaviour(model=Script({tuple(PROMPT): REPLY}))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=100,
                                                    stop_strings=("o t",)))
    assert answer(events) == "Hell"
    done = finished(events)
    assert done.finish_reason == "stop" and done.stop_string == "o t"
    fake = fakes.latest()
    assert words(fake.lines)[-2:] == ["generate", "cancel"]  # left early: the daemon stopped
    assert fake.decoded[-1].finish == "cancelled"


@pytest.mark.parametrize(("max_tokens", "reason", "capped"), [
    (None, "stop", True), (5, "stop", True), (4, "length", False)])
async def test_the_servers_output_cap_ends_the_turn_as_a_stop(
    fakes: FakeDaemons, max_tokens: int | None, reason: str, capped: bool,
) -> None:
    async with serving(served_model(max_output_tokens=5)) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=max_tokens))
    done = finished(events)
    assert (done.finish_reason, done.capped) == (reason, capped)
    assert done.completion_tokens == min(5, max_tokens or 5)


async def test_a_tool_call_is_a_tool_calls_finish(fakes: FakeDaemons) -> None:
    call = V.ids('<tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call>')
    fakes.defaults["model"] = Behaviour(model=Script({tuple(PROMPT): call}))
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=200,
                                                    parser_factory=ToolCallParser))
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("read", '{"path": "a"}')]
    assert finished(events).finish_reason == "tool_calls" and answer(events) == ""


async def test_a_prompt_past_the_context_is_a_400_before_any_command(
    fakes: FakeDaemons,
) -> None:
    async with serving(served_model(n_ctx=64)) as model:
        with pytest.raises(ContextLengthError):
            await run(model, GenerationRequest([1] * 64, max_tokens=4))
        # The daemon's own refusal is the same 400.
        fakes.latest().behaviour = Behaviour(refusals=(Refuse("generate", "context_overflow"),))
        with pytest.raises(ContextLengthError):
            await run(model, GenerationRequest(PROMPT, max_tokens=4))


# --- reasoning and logprobs ---------------------------------------------------------------

def thinker(prompt: Sequence[int], answer_ids: Sequence[int]) -> NextToken:
    """Reasons (letters) until the block is closed, then answers and ends."""
    def pick(context: Sequence[int]) -> int:
        if THINK_CLOSE not in context[len(prompt):]:
            return letters(context)
        after = list(context[len(context) - context[::-1].index(THINK_CLOSE):])
        while after and after[0] == ord("\n"):
            after.pop(0)
        return answer_ids[len(after)] if len(after) < len(answer_ids) else EOS

    return pick


async def test_the_reasoning_budget_closes_the_block_and_the_model_answers(
    fakes: FakeDaemons,
) -> None:
    prompt = V.ids("Why?<think>\n")
    fakes.defaults["model"] = Behaviour(model=thinker(prompt, V.ids("Because.")))
    plan = ReasoningPlan(ReasoningFormat("<think>", "</think>", None), inside=True, budget=4)
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(prompt, max_tokens=50, reasoning=plan))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == text_of(greedy(letters, prompt, 4))
    assert answer(events) == "Because."
    done = finished(events)
    closing = V.ids("\n</think>\n\n")
    assert done.reasoning_tokens == 4 and done.finish_reason == "stop"
    assert done.completion_tokens == 4 + len(closing) + len("Because.")
    fake = fakes.latest()
    # Stopped at the budget, closed the block as the template writes it, went on after it.
    assert words(fake.lines)[-4:] == ["generate", "cancel", "tokenize", "generate"]
    assert fake.decoded[-1].prompt == (*prompt, *greedy(letters, prompt, 4), *closing)


async def test_logprobs_come_before_each_tokens_text(fakes: FakeDaemons) -> None:
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=4, logprobs=2,
                                                    prompt_logprobs=True))
    tokens = greedy(letters, PROMPT, 4)
    scored = events[0]
    assert isinstance(scored, PromptLogprobs)
    want = [default_logprobs(PROMPT[:i], PROMPT[i], 2) for i in range(1, len(PROMPT))]
    assert [(e.token, e.logprob) for e in scored.entries] == [
        (bytes([r.token]), r.logprob) for r in want]
    records = [e for e in events if isinstance(e, TokenLogprob)]
    assert [r.token for r in records] == [bytes([t]) for t in tokens]
    for record, token, at in zip(records, tokens, range(4), strict=True):
        want_one = default_logprobs([*PROMPT, *tokens[:at]], token, 2)
        assert record.logprob == want_one.logprob
        assert record.top == tuple((bytes([t]), lp) for t, lp in want_one.top)
    # Each record comes before the text of its token.
    kinds = [type(e).__name__ for e in events if not isinstance(e, PromptLogprobs | Finished)]
    assert kinds == ["TokenLogprob", "TextDelta"] * 4
    assert "prompt_logprobs=1" in sent(fakes.latest().lines)[-1]


# --- the prefix cache's refusals: run cold -----------------------------------------------

CACHE = CacheSettings(ram_bytes=1 << 30)


@pytest.mark.parametrize("code", ["empty_slot", "snapshot_mismatch", "bad_slot"])
async def test_a_refusal_the_cache_earned_runs_the_request_cold(
    fakes: FakeDaemons, code: str,
) -> None:
    fakes.defaults["model"] = Behaviour(refusals=(Refuse("generate", code),))
    async with serving(served_model(cache=CACHE)) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=3))
    assert answer(events) == text_of(greedy(letters, PROMPT, 3))
    generates = [line for line in fakes.latest().lines if line.startswith("generate")]
    assert len(generates) == 2 and "reuse=0" not in generates[0]
    assert generates[1].endswith(" reuse=0")  # again, without the cache


async def test_any_other_refusal_is_the_requests_error(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(refusals=(Refuse("generate", "bad_grammar"),))
    async with serving(served_model(cache=CACHE)) as model:
        with pytest.raises(DaemonReplyError, match="bad_grammar"):
            await run(model, GenerationRequest(PROMPT, max_tokens=3))
    assert fakes.latest().words.count("generate") == 1


async def test_leaving_early_stops_the_daemons_generation(fakes: FakeDaemons) -> None:
    async with serving(served_model()) as model:
        async with aclosing(generate_events(model, GenerationRequest(PROMPT, 500))) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    break
        fake = fakes.latest()
        assert words(fake.lines)[-2:] == ["generate", "cancel"]
        assert fake.decoded[-1].finish == "cancelled"
        # The daemon is at a command boundary: the next request runs.
        events_after = await run(model, GenerationRequest(PROMPT, max_tokens=2))
        assert finished(events_after).completion_tokens == 2


# --- the prompt, tokenized on the daemon -----------------------------------------------------

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]


async def test_a_chat_prompt_is_tokenized_piece_by_piece_and_remembered(
    fakes: FakeDaemons,
) -> None:
    async with serving(served_model()) as model:
        prompt = await chat_prompt(model, MESSAGES)
        assert model.template is not None and model.template.is_fallback
        fake = fakes.latest()
        # Each piece between message boundaries was tokenized on its own, and the mark
        # is the end of the system part.
        assert prompt.ids == V.tokenize(prompt.text, special=True, add_bos=False)
        (mark,) = prompt.marks
        system_text = model.template.render(MESSAGES[:1], add_generation_prompt=False)
        assert V.render(prompt.ids[:mark], special=True).decode() == system_text
        tokenized = fake.words.count("tokenize")
        assert tokenized >= 2
        # The next turn repeats those pieces: they come from the model's memo.
        again = await chat_prompt(model, MESSAGES)
        assert again == prompt and fake.words.count("tokenize") == tokenized


async def test_a_quoted_reply_keeps_the_ids_it_was_generated_as(fakes: FakeDaemons) -> None:
    # A reply whose ids are not what tokenizing its text gives: "<s>" written as three
    # byte tokens, which the tokenizer reads as the one BOS token.
    reply = list(b"Ok <s> done")
    assert V.tokenize("Ok <s> done", special=True, add_bos=False) != reply
    fakes.defaults["model"] = Behaviour(model=Script({tuple(PROMPT): reply}))
    async with serving(served_model()) as model:
        await run(model, GenerationRequest(PROMPT, max_tokens=50))
        history = [*MESSAGES, {"role": "assistant", "content": "Ok <s> done"},
                   {"role": "user", "content": "And?"}]
        ids = (await chat_prompt(model, history)).ids
        assert any(ids[i:i + len(reply)] == reply for i in range(len(ids)))


async def test_a_death_mid_tokenize_is_retried_on_the_restarted_daemon(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.plan(Behaviour(deaths=(Death("tokenize"),)))
    async with serving(served_model()) as model:
        assert await tokenize_text(model, "abc") == [97, 98, 99]
        assert len(fakes.of("model")) == 2
    fakes.defaults["model"] = Behaviour(deaths=(Death("tokenize", nth=None),))
    async with serving(served_model()) as model:
        with pytest.raises(ServiceUnavailableError, match="not available"):
            await tokenize_text(model, "abc")


async def test_prompt_lookup_needs_a_model_that_serves_it(fakes: FakeDaemons) -> None:
    request = GenerationRequest(PROMPT, max_tokens=4, lookup=True)
    async with serving(served_model()) as model:
        with pytest.raises(BadRequestError, match="serves no prompt lookup"):
            await prepare_generation(model, request, {})
    async with serving(served_model(lookup="opt-in")) as model:
        assert await prepare_generation(model, request, {}) == request
        events = await run(model, request)
        assert "lookup=1" in sent(fakes.latest().lines)[-1]
        speculation = finished(events).speculative
        assert speculation is not None and speculation.method == "lookup"
        assert speculation.draft_steps == 2 and speculation.acceptance_length == 3.0
        # Asked without lookup: the daemon ran no proposer, so nothing to report.
        events = await run(model, GenerationRequest(PROMPT, max_tokens=4, lookup=False))
        assert finished(events).speculative is None


async def test_scoring_a_prompt_alone_generates_nothing(fakes: FakeDaemons) -> None:
    async with serving(served_model()) as model:
        events = await run(model, GenerationRequest(PROMPT, max_tokens=0, logprobs=0,
                                                    prompt_logprobs=True))
    assert isinstance(events[0], PromptLogprobs) and len(events[0].entries) == len(PROMPT) - 1
    assert finished(events).completion_tokens == 0
    assert " 0 logprobs=0 " in sent(fakes.latest().lines)[-1] + " "


async def test_losing_what_the_cache_keeps_never_fails_a_finished_request(
    fakes: FakeDaemons,
) -> None:
    """keep_sequence's snapshot and settle's list_slots come after the generation: a
    daemon that dies there costs the cache its booking, not the request its answer."""
    system = list(b"S" * 40)
    prompt = [*system, *V.ids("question")]
    fakes.plan(Behaviour(deaths=(Death("snapshot"),)),  # keep_sequence
               Behaviour(deaths=(Death("list_slots"),)))  # settle
    for _ in range(2):
        model = served_model(cache=CACHE, parallel=2, deterministic=True)
        async with serving(model):
            events = await run(model, GenerationRequest(prompt, max_tokens=3, marks=(40,)))
            assert answer(events) == text_of(greedy(letters, prompt, 3))
            assert finished(events).recoveries == 0
    assert [f.returncode for f in fakes.of("model")[:2]] == [-9, -9]
