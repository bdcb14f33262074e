"""The supervisor (orchestrator/supervisor.py) on in-memory daemons, on trio's MockClock.

Each rule of its docstring, timed: a ready daemon's crash is restarted at once, crashes
and failed loads without progress back off exponentially (capped), ``max_failures`` of
them in a row give up, progress (tokens streamed, or up for ``healthy_after_s``) starts
a new streak, an intentional stop is never restarted, a model on demand is started by
its first request and a wake that fails goes back to ``unloaded`` with the reason, an
unreachable host is retried without building a streak. The fakes start and die in no
time, so the gaps between starts are exactly the backoff the supervisor slept.
What a real kill looks like end to end stays in tests/orchestrator/test_supervision.py.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import trio

import orchestrator.supervisor
from daemons.client import DaemonClient
from daemons.errors import DaemonDiedError
from orchestrator.errors import DaemonUnrecoverableError, ServiceUnavailableError
from orchestrator.supervisor import DaemonState, RestartPolicy, Supervisor
from tests.fake_daemon import Behaviour, Death, FakeDaemons, Startup, fake_launch, install

POLICY = RestartPolicy(first_delay_s=0.0, base_delay_s=0.5, max_delay_s=4.0, max_failures=8,
                       healthy_after_s=60.0)
FAILS_TO_LOAD = Behaviour(startup=Startup.refuse("load_failed", "out of memory"))
DIES_WHEN_READY = Behaviour(deaths=(Death("ready"),))


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> FakeDaemons:
    # The supervisor times a daemon's life with time.monotonic; on the mock clock, so a
    # test can let one live "60 s" in no time.
    monkeypatch.setattr(orchestrator.supervisor, "time", SimpleNamespace(
        monotonic=trio.current_time))
    return install(monkeypatch)


def gaps(fakes: FakeDaemons) -> list[float]:
    """Seconds between consecutive daemon starts."""
    starts = [fake.started_at for fake in fakes.of("model")]
    return [round(b - a, 3) for a, b in itertools.pairwise(starts)]


def state(supervisor: Supervisor) -> DaemonState:
    """Read afresh (mypy would keep a state asserted before an await)."""
    return supervisor.state


async def kill(supervisor: Supervisor, fakes: FakeDaemons) -> float:
    """SIGKILL the supervised daemon; once its successor is ready, the seconds between
    the kill and the successor's start."""
    dying = supervisor.client
    assert dying is not None
    killed_at = trio.current_time()
    fakes.latest().kill()
    await dying.exited.wait()
    await supervisor.wait_ready()
    return fakes.latest().started_at - killed_at


async def test_the_backoff_of_failed_loads_and_giving_up(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.defaults["model"] = FAILS_TO_LOAD
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    with (trio.fail_after(1000),
          pytest.raises(DaemonUnrecoverableError, match="gave up after 8 failures in a row")):
        await supervisor.run()
    assert gaps(fakes) == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert state(supervisor) is DaemonState.FAILED and supervisor.failed_loads == 8
    assert "failed to load" in supervisor.detail and "out of memory" in supervisor.detail
    assert [POLICY.delay(n) for n in range(1, 8)] == gaps(fakes)


async def test_crashes_before_any_progress_back_off_the_same_way(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.defaults["model"] = DIES_WHEN_READY
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    with trio.fail_after(1000), pytest.raises(DaemonUnrecoverableError, match="SIGKILL"):
        await supervisor.run()
    assert gaps(fakes) == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert supervisor.crashes == 8 and supervisor.failed_loads == 0


async def test_a_crash_after_progress_is_restarted_at_once(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """Three crashes in a row without progress (backing off), then one mid-stream: its
    restart is immediate, and the next crash without progress starts a new streak."""
    fakes.plan(DIES_WHEN_READY, DIES_WHEN_READY, DIES_WHEN_READY,
               Behaviour(deaths=(Death("generate", after_tokens=2),)), DIES_WHEN_READY)
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        client = await supervisor.wait_ready()  # the fourth: it serves
        assert supervisor.starts == 4
        async with client.generate([1, 2, 3], 10) as stream:
            with pytest.raises(DaemonDiedError, match="SIGKILL"):
                await stream.collect()
        while supervisor.starts < 6:  # noqa: ASYNC110 (polled on the mock clock)
            await trio.sleep(0.001)
        await supervisor.wait_ready()
        nursery.cancel_scope.cancel()
    # 0, 0.5 and 1 before the fourth; at once after its crash, which followed progress
    # (a new streak), then 0.5: the second crash of that streak.
    assert gaps(fakes) == [0.0, 0.5, 1.0, 0.0, 0.5]
    assert supervisor.crashes == 5


async def test_a_daemon_up_for_healthy_after_s_starts_a_new_streak(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.plan(DIES_WHEN_READY, DIES_WHEN_READY, DIES_WHEN_READY)
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        await supervisor.wait_ready()  # the fourth stays up
        await trio.sleep(POLICY.healthy_after_s - 1)
        await kill(supervisor, fakes)  # up 59 s, served nothing: the streak goes on
        await trio.sleep(POLICY.healthy_after_s)
        await kill(supervisor, fakes)  # up 60 s: no crash loop, restarted at once
        nursery.cancel_scope.cancel()
    assert gaps(fakes) == [0.0, 0.5, 1.0, POLICY.healthy_after_s - 1 + 2.0,
                           POLICY.healthy_after_s]
    assert supervisor.crashes == 5


async def test_a_restart_is_what_a_waiting_request_gets(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        first = await supervisor.wait_ready()
        assert state(supervisor) is DaemonState.READY and supervisor.pid == first.pid
        fakes.latest().kill()
        await first.exited.wait()
        second = await supervisor.wait_ready()
        assert second is not first and second.pid == fakes.latest().pid
        assert supervisor.restarts == 1 and supervisor.crashes == 1
        assert "SIGKILL" in (supervisor.last_exit or "")
        assert "fake: loading" in (supervisor.last_exit or "")  # its stderr tail
        nursery.cancel_scope.cancel()
    assert state(supervisor) is DaemonState.STOPPED


async def test_an_intentional_stop_is_never_restarted(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor("m", fake_launch(), policy=POLICY)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        client = await supervisor.wait_ready()
        await supervisor.stop()
        assert state(supervisor) is DaemonState.UNLOADED and supervisor.unloads == 1
        assert client.intentional_exit and client.returncode == 0
        assert fakes.latest().lines[-1] == "quit"
        await trio.sleep(1000)
        assert len(fakes.of("model")) == 1 and supervisor.crashes == 0
        with pytest.raises(ServiceUnavailableError, match="unloaded"):
            supervisor.ready_client()
        # The next request's wait starts it again.
        again = await supervisor.wait_ready()
        assert again is not client and len(fakes.of("model")) == 2
        nursery.cancel_scope.cancel()  # shutdown: quit, no restart
    assert state(supervisor) is DaemonState.STOPPED
    assert fakes.latest().returncode == 0 and len(fakes.of("model")) == 2


async def test_a_model_on_demand_starts_with_its_first_request(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    supervisor = Supervisor("m", fake_launch(), policy=POLICY, on_demand=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        await trio.sleep(100)
        assert state(supervisor) is DaemonState.UNLOADED and not fakes.started
        client = await supervisor.wait_ready()
        assert state(supervisor) is DaemonState.READY and client.pid == fakes.latest().pid
        nursery.cancel_scope.cancel()


async def test_a_wake_that_fails_is_a_503_with_the_reason_and_keeps_the_server_up(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    fakes.defaults["model"] = FAILS_TO_LOAD
    policy = RestartPolicy(max_failures=3, base_delay_s=0.5)
    supervisor = Supervisor("m", fake_launch(), policy=policy, on_demand=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        with pytest.raises(ServiceUnavailableError,
                           match=r"could not be loaded \(3 tries\).*out of memory"):
            await supervisor.wait_ready()
        assert state(supervisor) is DaemonState.UNLOADED and supervisor.wake_failures == 1
        assert len(fakes.of("model")) == 3
        await trio.sleep(1000)
        assert len(fakes.of("model")) == 3  # nothing retries on its own
        # The next request tries again; this time the model loads.
        fakes.defaults["model"] = Behaviour()
        client = await supervisor.wait_ready()
        assert client.pid == fakes.latest().pid and len(fakes.of("model")) == 4
        nursery.cancel_scope.cancel()


async def test_an_unreachable_host_is_retried_and_builds_no_streak(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    # ssh exits 255 when it cannot connect, before a byte came back.
    fakes.defaults["model"] = Behaviour(startup=Startup.crash(255))
    launch = fake_launch(channel="stdout", keepalive_ms=1000, host="far", link_timeout_s=3.0)
    supervisor = Supervisor("m", launch, policy=POLICY)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        await trio.sleep(3.0 * 20 + 1)
        assert state(supervisor) is DaemonState.UNREACHABLE
        with pytest.raises(ServiceUnavailableError, match="unreachable"):
            await supervisor.wait_ready()  # at once, not after a wait
        assert supervisor.unreachable_starts >= 20 > POLICY.max_failures
        assert set(gaps(fakes)) == {supervisor.host_retry_s} == {3.0}
        fakes.defaults["model"] = Behaviour()  # the host answers again
        await trio.sleep(3.0)
        assert isinstance(await supervisor.wait_ready(), DaemonClient)
        # Its first crash is the first of a streak: restarted at once, not given up on.
        assert await kill(supervisor, fakes) == 0.0
        nursery.cancel_scope.cancel()


async def test_a_death_while_starting_counts_as_a_crash(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """The daemon died while on_ready talked to it (the piece table, as ServedModel's)."""
    fakes.plan(Behaviour(deaths=(Death("vocab"),)))

    async def on_ready(client: DaemonClient) -> None:
        await client.piece_table()

    supervisor = Supervisor("m", fake_launch(), policy=POLICY, on_ready=on_ready)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        client = await supervisor.wait_ready()
        assert supervisor.crashes == 1 and supervisor.starts == 2
        assert client.pid == fakes.latest().pid
        assert "daemon was killed by SIGKILL" in (supervisor.last_exit or "")
        nursery.cancel_scope.cancel()


async def test_a_target_waits_for_the_shards_it_needs(
    fakes: FakeDaemons, autojump_clock: trio.testing.MockClock,
) -> None:
    """A ds4 target starts once its shard is ready; while the shard is not, after
    host_retry_s of waiting, the target is unreachable (no streak) and tries again."""
    fakes.plan(Behaviour(startup=Startup(delay_s=5.0)))  # the shard: slower than 4 s
    shard = Supervisor("shard", fake_launch("ds4_shard", rpc_listen="127.0.0.1:50052"),
                       policy=POLICY)
    target = Supervisor("target", fake_launch("laguna", rpc=("127.0.0.1:50052",)),
                        policy=POLICY, needs=(shard,))
    assert target.host_retry_s == POLICY.max_delay_s == 4.0
    async with trio.open_nursery() as nursery:
        await nursery.start(shard.run)
        await nursery.start(target.run)
        await trio.sleep(4.5)
        assert state(target) is DaemonState.UNREACHABLE and "waiting for shard" in target.detail
        with trio.fail_after(10):
            while state(target) is not DaemonState.READY:  # noqa: ASYNC110
                await trio.sleep(0.1)
        shard_fake, target_fake = fakes.of("model")
        assert shard_fake.ready is not None and shard_fake.ready.fields["rpc"] == "127.0.0.1:50052"
        # Tried again after 4 s of waiting and 4 s of rest; the shard was ready at 5 s.
        assert shard_fake.started_at == 0 and target_fake.started_at == pytest.approx(8.0)
        assert target.crashes == target.failed_loads == 0
        nursery.cancel_scope.cancel()
