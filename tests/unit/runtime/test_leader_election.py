"""The Lease elector against a fake Lease API and a virtual clock (client-go's rules)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tensorfusion.runtime.leader_election import LeaderElector, NotLeaderError
from tensorfusion.runtime.leader_election_lock import micro_time

from .test_leader_election_fakes import (
    LEASE,
    NAMESPACE,
    FakeClient,
    FakeClock,
    FakeStore,
    Transitions,
    api_error,
    elector,
    start,
)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def lead(
    store: FakeStore, clock: FakeClock, identity: str = "me", **kwargs: Any
) -> tuple[LeaderElector, FakeClient, Transitions, asyncio.Task[Any]]:
    """An elector that has just acquired a free Lease."""
    client = FakeClient(store)
    candidate = elector(client, clock, identity, **kwargs)
    transitions = Transitions()
    task = start(candidate, clock, transitions)
    await clock.settle()
    assert candidate.is_leader
    return candidate, client, transitions, task


# --------------------------------------------------------------------------- acquire


async def test_acquires_a_lease_that_does_not_exist(store: FakeStore, clock: FakeClock) -> None:
    candidate, _, transitions, _ = await lead(store, clock)

    record = store.record()
    assert record.holder == "me"
    assert record.lease_duration_seconds == 5
    assert record.transitions == 0
    assert record.acquire_time == record.renew_time == clock.written()
    assert transitions.events == ["started"]
    assert candidate.fence() > 0
    await candidate.wait_until_leader()


async def test_acquires_a_released_lease_at_once_and_counts_the_transition(
    store: FakeStore, clock: FakeClock
) -> None:
    store.set_record("", renew_time=clock.wall(), duration=1, transitions=4)

    candidate, _, _, _ = await lead(store, clock)

    assert store.record().holder == "me"
    assert store.record().transitions == 5
    assert candidate.holder == "me"


async def test_a_restarted_holder_with_the_same_identity_resumes_at_once(
    store: FakeStore, clock: FakeClock
) -> None:
    acquired = clock.wall() - timedelta(hours=1)
    store.set_record("me", renew_time=clock.wall(), transitions=2, acquire_time=acquired)

    await lead(store, clock)

    record = store.record()
    assert (record.transitions, record.acquire_time) == (2, micro_time(acquired))  # as client-go


async def test_waits_while_the_holder_keeps_renewing(store: FakeStore, clock: FakeClock) -> None:
    store.set_record("other", renew_time=clock.wall())
    candidate = elector(FakeClient(store), clock, "me")
    transitions = Transitions()
    start(candidate, clock, transitions)

    for _ in range(30):  # six lease durations, the holder renewing every second
        await clock.advance(1)
        store.set_record("other", renew_time=clock.wall())
        assert not candidate.is_leader
        with pytest.raises(NotLeaderError):
            candidate.fence()
    assert candidate.holder == "other"

    took = await clock.advance_until(lambda: candidate.is_leader, within=10)
    # The last renewal was seen at the next poll, a second after it: a lease duration from then.
    assert took == 6
    assert store.record().transitions == 1
    assert transitions.events == ["started"]


@pytest.mark.parametrize("renew_offset", [timedelta(hours=1), -timedelta(hours=1)])
async def test_expiry_is_judged_by_the_candidates_own_observation_not_remote_timestamps(
    store: FakeStore, clock: FakeClock, renew_offset: timedelta
) -> None:
    """A holder whose clock is an hour ahead (renewTime in the future) is taken over once the
    record stayed unchanged for a lease duration here; one whose clock is an hour behind is not
    taken over before that."""
    store.set_record("other", renew_time=clock.wall() + renew_offset, transitions=3)
    candidate = elector(FakeClient(store), clock, "me")
    start(candidate, clock, Transitions())

    await clock.advance(4.999)
    assert not candidate.is_leader
    assert candidate.holder == "other"

    await clock.advance(0.001)
    assert candidate.is_leader
    record = store.record()
    assert (record.holder, record.transitions, record.acquire_time) == ("me", 4, clock.written())


async def test_a_candidate_polls_at_the_observed_expiry_not_a_retry_period_later(
    store: FakeStore, clock: FakeClock
) -> None:
    store.set_record("other", renew_time=clock.wall())
    candidate = elector(FakeClient(store), clock, "me", retry_period=2)  # polls at 0, 2, 4, ...
    start(candidate, clock, Transitions())

    took = await clock.advance_until(lambda: candidate.is_leader, within=10)

    assert took == 5


async def test_a_candidate_that_loses_the_race_stays_a_follower(
    store: FakeStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.set_record("", renew_time=clock.wall(), duration=1)
    client = FakeClient(store)
    client.before["replace"] = lambda: store.set_record("rival", renew_time=clock.wall())
    candidate = elector(client, clock, "me")
    task = start(candidate, clock, Transitions())

    with caplog.at_level(logging.INFO):
        await clock.advance(3)

    assert not candidate.is_leader
    assert candidate.holder == "rival"
    assert store.record().holder == "rival"
    assert candidate.failed_attempts == 1
    assert not task.done()
    assert "lost the race" in caplog.text


# --------------------------------------------------------------------------- renew


async def test_the_leader_renews_every_retry_period(store: FakeStore, clock: FakeClock) -> None:
    candidate, client, transitions, _ = await lead(store, clock)
    acquired = store.record().acquire_time

    for _ in range(20):
        client.calls.clear()
        await clock.advance(1)
        record = store.record()
        assert record.renew_time == clock.written()
        assert (record.holder, record.acquire_time, record.transitions) == ("me", acquired, 0)
        assert client.calls == ["replace"]  # the fast path: no read while nothing changed
    assert candidate.is_leader
    assert transitions.events == ["started"]


async def test_a_renewal_conflict_from_a_metadata_change_reads_again_and_keeps_leading(
    store: FakeStore, clock: FakeClock
) -> None:
    candidate, client, _, _ = await lead(store, clock)
    store.touch()
    client.calls.clear()

    await clock.advance(1)

    assert client.calls == ["replace", "get", "replace"]
    assert candidate.is_leader
    assert store.record().renew_time == clock.written()
    assert store.record().transitions == 0


async def test_the_leader_loses_at_once_when_another_holder_took_the_lease(
    store: FakeStore, clock: FakeClock
) -> None:
    candidate, _, transitions, task = await lead(store, clock)
    store.set_record("rival", renew_time=clock.wall(), transitions=1)

    await clock.advance(1)  # the next renewal: 409, then the rival is seen in the Lease

    assert candidate.leadership_lost.is_set()
    assert not candidate.is_leader
    assert transitions.events == ["started", "stopped"]
    assert task.done() and task.result() is None
    assert store.record().holder == "rival"
    with pytest.raises(NotLeaderError):
        candidate.fence()


async def test_the_leader_loses_when_no_renewal_succeeds_within_the_renew_deadline(
    store: FakeStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    candidate, client, transitions, task = await lead(store, clock)
    client.fail_always = api_error(500)

    await clock.advance(2.999)  # renewals at +1 and +2 failed
    assert candidate.is_leader
    assert not candidate.leadership_lost.is_set()
    candidate.fence()

    await clock.advance(0.001)  # +3: the renew deadline
    assert candidate.leadership_lost.is_set()
    assert not candidate.is_leader
    assert task.done()
    assert transitions.events == ["started", "stopped"]
    with pytest.raises(NotLeaderError):
        candidate.fence()
    assert "API error 500" in caplog.text


async def test_a_renewal_that_hangs_does_not_keep_leadership_past_the_deadline(
    store: FakeStore,
) -> None:
    """Real time here: the elector cuts a hung request off at the renew deadline."""
    client = FakeClient(store)
    candidate = LeaderElector(client.as_client(), NAMESPACE, LEASE, "me", 2, 0.5, 0.1)
    task = candidate.start()
    await asyncio.wait_for(candidate.wait_until_leader(), timeout=30)
    client.hang = {"replace", "get"}

    await asyncio.wait_for(candidate.leadership_lost.wait(), timeout=30)

    assert not candidate.is_leader
    await asyncio.wait_for(task, timeout=30)


async def test_the_fence_closes_at_the_margin_before_the_lease_could_expire(
    store: FakeStore, clock: FakeClock
) -> None:
    candidate, client, _, _ = await lead(store, clock, fence_margin=3.5)
    client.fail_always = api_error(503)

    await clock.advance(1.499)
    assert candidate.fence() == pytest.approx(0.001)

    await clock.advance(0.001)  # 5 s lease - 3.5 s margin: still leader, but may not write
    assert candidate.is_leader
    with pytest.raises(NotLeaderError, match="too old"):
        candidate.fence()


async def test_no_moment_when_the_old_leaders_fence_passes_and_another_leads(
    store: FakeStore, clock: FakeClock
) -> None:
    """The leader is cut off from the API server while a follower still reaches it. A write the
    old leader makes after its fence passed, and that takes up to half the margin to reach the
    API server, still lands before the follower can lead."""
    old, old_client, _, _ = await lead(store, clock, "old")
    new = elector(FakeClient(store), clock, "new")
    start(new, clock, Transitions())
    await clock.advance(0.5)
    old_client.fail_always = httpx.ConnectError("cut off")

    last_fence_passed = clock.now
    for _ in range(2000):
        await clock.advance(0.01)
        if new.is_leader:
            break
        try:
            old.fence()
            last_fence_passed = clock.now
        except NotLeaderError:
            pass
    assert new.is_leader
    with pytest.raises(NotLeaderError):
        old.fence()
    assert clock.now - last_fence_passed >= old.fence_margin / 2
    assert old.leadership_lost.is_set()


# --------------------------------------------------------------------------- errors


async def test_a_candidate_keeps_trying_through_api_errors(
    store: FakeStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient(store)
    client.fail["get"] = [
        api_error(500),
        api_error(429, "TooManyRequests"),
        httpx.ConnectError("refused"),
        RuntimeError("a bug somewhere"),
    ]
    candidate = elector(client, clock, "me")
    task = start(candidate, clock, Transitions())

    took = await clock.advance_until(lambda: candidate.is_leader, within=10)

    assert took == 4  # one retry period after each of the four failures
    assert candidate.failed_attempts == 4
    assert not task.done()
    assert "API error 500" in caplog.text
    assert "API error 429" in caplog.text
    assert "ConnectError" in caplog.text
    assert "a bug somewhere" in caplog.text


async def test_a_callback_that_raises_is_logged_and_leadership_goes_on(
    store: FakeStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise ValueError("callback bug")

    candidate = elector(FakeClient(store), clock, "me")
    clock.track(candidate.start(on_started_leading=broken))
    await clock.advance(10)

    assert candidate.is_leader
    assert store.record().renew_time == clock.written()
    assert "on_started_leading raised" in caplog.text


# --------------------------------------------------------------------------- release


async def test_release_frees_the_lease_and_a_follower_takes_it_at_its_next_poll(
    store: FakeStore, clock: FakeClock
) -> None:
    leader, _, transitions, task = await lead(store, clock, "leader")
    follower = elector(FakeClient(store), clock, "follower")
    start(follower, clock, Transitions())
    await clock.advance(0.5)
    assert follower.holder == "leader"

    assert await leader.release()

    record = store.record()
    assert (record.holder, record.lease_duration_seconds, record.transitions) == ("", 1, 0)
    assert task.done()
    assert not leader.is_leader
    assert not leader.leadership_lost.is_set()  # a release is no loss
    assert transitions.events == ["started", "stopped"]
    with pytest.raises(NotLeaderError):
        leader.fence()
    took = await clock.advance_until(lambda: follower.is_leader, within=10)
    assert took <= 1  # its next poll, not the 5 s lease duration
    assert store.record().transitions == 1


async def test_cancelling_the_task_releases_the_lease(store: FakeStore, clock: FakeClock) -> None:
    leader, _, transitions, task = await lead(store, clock)

    task.cancel()
    await asyncio.wait({task})

    assert task.cancelled()
    assert store.record().holder == ""
    assert transitions.events == ["started", "stopped"]
    assert not leader.is_leader


async def test_without_release_on_cancel_the_lease_stays_held_until_it_expires(
    store: FakeStore, clock: FakeClock
) -> None:
    leader, _, _, task = await lead(store, clock, "leader", release_on_cancel=False)
    follower = elector(FakeClient(store), clock, "follower")
    start(follower, clock, Transitions())
    await clock.advance(0.5)

    task.cancel()  # kill -9
    await asyncio.wait({task})

    assert store.record().holder == "leader"
    assert not leader.is_leader
    took = await clock.advance_until(lambda: follower.is_leader, within=10)
    assert took == 4.5  # the lease duration after the last renewal was seen at +0


async def test_release_reads_again_after_a_conflict(store: FakeStore, clock: FakeClock) -> None:
    leader, client, _, _ = await lead(store, clock)
    store.touch()

    assert await leader.release()

    assert client.calls[-3:] == ["replace", "get", "replace"]
    assert store.record().holder == ""


async def test_release_leaves_a_lease_someone_else_holds(
    store: FakeStore, clock: FakeClock
) -> None:
    leader, _, _, _ = await lead(store, clock)
    store.set_record("rival", renew_time=clock.wall())

    assert await leader.release()

    assert store.record().holder == "rival"


async def test_a_failed_release_is_reported(store: FakeStore, clock: FakeClock) -> None:
    leader, client, _, _ = await lead(store, clock)
    client.fail_always = api_error(500)

    assert not await leader.release()
    assert store.record().holder == "me"


async def test_the_context_manager_releases_on_exit(store: FakeStore, clock: FakeClock) -> None:
    candidate = elector(FakeClient(store), clock, "me")
    async with candidate:
        await candidate.wait_until_leader()
        assert store.record().holder == "me"
    assert store.record().holder == ""
    assert not candidate.is_leader


async def test_wait_until_leader_raises_when_the_election_stops_first(
    store: FakeStore, clock: FakeClock
) -> None:
    store.set_record("other", renew_time=clock.wall())
    candidate = elector(FakeClient(store), clock, "me")
    start(candidate, clock, Transitions())
    waiter = asyncio.create_task(candidate.wait_until_leader())
    await clock.advance(1)

    await candidate.stop()

    with pytest.raises(NotLeaderError):
        await asyncio.wait_for(waiter, timeout=30)
    assert store.record().holder == "other"


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identity": ""}, "identity"),
        ({"lease_duration": 2.5}, "whole number"),
        ({"lease_duration": 0}, "whole number"),
        ({"renew_deadline": 5}, "renew deadline"),
        ({"retry_period": 3}, "retry period"),
        ({"fence_margin": 0}, "fence margin"),
        ({"fence_margin": 5}, "fence margin"),
        ({"jitter_factor": -1}, "jitter"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "identity": "me",
        "lease_duration": 5,
        "renew_deadline": 3,
        "retry_period": 1,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        LeaderElector(FakeClient(FakeStore()).as_client(), NAMESPACE, LEASE, **arguments)


def test_the_defaults_are_the_operators() -> None:
    candidate = LeaderElector(FakeClient(FakeStore()).as_client(), NAMESPACE, LEASE, "pod-0")
    assert (
        candidate.lease_duration_seconds,
        candidate.renew_deadline,
        candidate.retry_period,
        candidate.fence_margin,
    ) == (15, 10, 2, 5)
