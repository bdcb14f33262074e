"""Slots and lanes (orchestrator/slots.py) on in-memory daemons: a ``--parallel`` daemon and
its parked tokenizer, started together, behind the ``DaemonClient`` API.

The real ``open_slot_client``, ``SlotClient``, ``BatchClient`` and supervisor run
against tests/fake_daemon; these tests check how requests map onto the daemon's
sequences, that a sequence is freed when its request leaves (and only that sequence
is cancelled), how the two daemons start and die together. What concurrent decoding
does to tokens stays in tests/orchestrator/test_slots.py.
"""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio

from daemons.errors import DaemonDiedError, DaemonStartError
from orchestrator.events import Finished, GenerationRequest, TextDelta
from orchestrator.generation import generate_events
from orchestrator.slots import TOKENIZER_N_CTX, SlotClient, open_slot_client
from tests.fake_daemon import (
    Behaviour,
    FakeDaemons,
    Startup,
    fake_launch,
    install,
    letters,
    served_model,
    serving,
)

PARALLEL = 3


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    return install(monkeypatch)


def greedy(prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(letters([*prompt, *out]))
    return out


async def test_the_tokenizer_starts_parked_beside_the_daemon(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """Both start at once: a (re)start waits for the slower of the two, not their sum."""
    fakes.plan(Behaviour(startup=Startup(delay_s=3.0)))
    fakes.plan(Behaviour(startup=Startup(delay_s=2.0)), kind="tokenizer")
    began = trio.current_time()
    async with open_slot_client(fake_launch(parallel=PARALLEL, n_ctx=4096)) as client:
        assert trio.current_time() - began == pytest.approx(3.0)
        assert isinstance(client, SlotClient) and client.parallel == PARALLEL
        model, tokenizer = fakes.latest("model"), fakes.latest("tokenizer")
        assert f"--parallel={PARALLEL}" in model.argv and "--parked=on" not in model.argv
        assert "--parked=on" in tokenizer.argv and "--parallel" not in " ".join(tokenizer.argv)
        assert f"--n-ctx={TOKENIZER_N_CTX}" in tokenizer.argv
        assert {"--threads=1", "--n-gpu-layers=0"} <= set(tokenizer.argv)
        assert client.tokenizer.ready is not None
        assert client.tokenizer.ready.fields["parked"] == "1"
        assert (await client.tokenizer.stats())["parked"] == "1"
        assert (await client.stats())["parked"] == "0"
        # tokenize goes to the tokenizer: the model's daemon would make it wait (9.3).
        assert await client.tokenize("abc") == [97, 98, 99]
        assert tokenizer.words == ["stats", "tokenize"] and "tokenize" not in model.words
        with pytest.raises(ValueError, match="version 1 stream command"):
            await client._stream_command(model.commands[0])


async def test_requests_map_onto_free_sequences_and_free_them_on_exit(
    fakes: FakeDaemons,
) -> None:
    fakes.defaults["model"] = Behaviour(token_delay_s=0.001)
    async with open_slot_client(fake_launch(parallel=PARALLEL, n_ctx=4096)) as client:
        fake = fakes.latest("model")
        all_in = trio.Event()

        async def request(n: int) -> None:
            async with client.generate([n, n + 1], 5) as stream:
                if client.slots_busy == PARALLEL:
                    all_in.set()
                await all_in.wait()
                assert len(await stream.collect()) == 5

        async with trio.open_nursery() as nursery:
            for n in range(PARALLEL):
                nursery.start_soon(request, 10 * n)
        assert sorted(d.seq for d in fake.decoded) == list(range(PARALLEL))
        assert client.slots_busy == 0 and client._free == list(range(PARALLEL))
        # A held sequence: every generate on it runs there, and it is not handed out.
        async with client.sequence(lambda free: free[-1]) as held:
            assert held == PARALLEL - 1 and client.slots_busy == 1
            async with client.generate([1], 2, seq=held) as stream:
                await stream.collect()
            async with client.generate([2], 2) as other:
                await other.collect()
            assert [d.seq for d in fake.decoded[-2:]] == [held, 0]
            with pytest.raises(ValueError, match="not held"):
                async with client.generate([1], 2, seq=0):
                    pass
        assert client.slots_busy == 0


async def test_leaving_early_cancels_only_that_sequence(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(token_delay_s=0.001)
    async with open_slot_client(fake_launch(parallel=2, n_ctx=4096)) as client:
        fake = fakes.latest("model")
        async with client.generate([1, 2, 3], 400) as long, client.generate([4, 5], 20) as short:
            await long.__anext__()
            assert len(await short.collect()) == 20
        # Leaving the block cancelled sequence 0 alone, and waited for its end.
        assert "cancel 0" in fake.lines and "cancel 1" not in fake.lines
        finishes = {d.seq: d.finish for d in fake.decoded}
        assert finishes == {0: "cancelled", 1: "length"}
        assert client.slots_busy == 0 and not client.batch.busy(0)
        async with client.generate([7], 3) as again:
            assert len(await again.collect()) == 3


async def test_a_daemon_that_fails_to_start_stops_its_tokenizer(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(startup=Startup.refuse("bad_flag", "no such draft")))
    with pytest.raises(DaemonStartError, match="bad_flag"):
        async with open_slot_client(fake_launch(parallel=2)):
            pytest.fail("a daemon that refused to start came up")
    tokenizer = fakes.latest("tokenizer")
    assert tokenizer.returncode == 0 and tokenizer.lines[-1] == "quit"


async def test_a_tokenizer_that_fails_to_start_fails_the_start(fakes: FakeDaemons) -> None:
    fakes.plan(Behaviour(startup=Startup.crash()), kind="tokenizer")
    with pytest.raises(DaemonStartError, match="killed by SIGKILL before its ready line"):
        async with open_slot_client(fake_launch(parallel=2)):
            pytest.fail("a model without its tokenizer came up")
    assert not fakes.latest("model").alive


async def test_the_tokenizer_dying_restarts_the_model(fakes: FakeDaemons) -> None:
    async with serving(served_model(parallel=2)) as model:
        first = model.supervisor.client
        assert first is not None
        fakes.latest("tokenizer").kill()
        with trio.fail_after(5):
            await first.exited.wait()
        assert first.returncode == -9  # killed with it: both come back together
        client = await model.supervisor.wait_ready()
        assert client is not first and model.supervisor.restarts == 1
        assert len(fakes.of("model")) == len(fakes.of("tokenizer")) == 2
        assert await client.tokenize("x") == [ord("x")]


async def test_a_kill_with_streams_open_resumes_every_stream(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.defaults["model"] = Behaviour(token_delay_s=0.01)
    prompts = [[65 + n] * 4 for n in range(PARALLEL)]
    async with serving(served_model(parallel=PARALLEL)) as model:
        flowing = [trio.Event() for _ in prompts]
        results: dict[int, tuple[str, Finished]] = {}

        async def run(n: int) -> None:
            text = ""
            request = GenerationRequest(prompts[n], max_tokens=12)
            async with aclosing(generate_events(model, request)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        text += event.text
                        if len(text) >= 3:
                            flowing[n].set()
                    elif isinstance(event, Finished):
                        results[n] = (text, event)

        async with trio.open_nursery() as nursery:
            for n in range(PARALLEL):
                nursery.start_soon(run, n)
            for event in flowing:
                await event.wait()
            fakes.latest("model").kill()
        assert model.supervisor.restarts == 1
        for n, prompt in enumerate(prompts):
            text, done = results[n]
            assert text == bytes(greedy(prompt, 12)).decode()
            assert done.recoveries == 1 and done.completion_tokens == 12
        # The restarted daemon resumed each on some sequence, from where it stood.
        resumed = fakes.latest("model").decoded
        assert sorted(d.seq for d in resumed) == list(range(PARALLEL))
        assert all(len(d.prompt) > 4 for d in resumed)


async def test_a_dead_daemon_fails_every_open_sequence(fakes: FakeDaemons) -> None:
    fakes.defaults["model"] = Behaviour(token_delay_s=0.001)
    async with open_slot_client(fake_launch(parallel=2)) as client:
        with pytest.raises(DaemonDiedError, match="SIGKILL"):
            async with client.generate([1], 100) as a, client.generate([2], 100):
                await a.__anext__()
                fakes.latest("model").kill()
                await a.collect()
        with pytest.raises(DaemonDiedError):
            await client.stats()
