"""Lease election against the real API server: two electors, a kill, a release, a lost lease."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.resources.coordination_v1 import Lease

from tensorfusion.devenv.replica_pods import stand_in_pod
from tensorfusion.runtime.leader_election import (
    LEASE_NAME,
    LeaderElector,
    LeaseRecord,
    NotLeaderError,
    read_leader_ip,
)
from tensorfusion.runtime.leader_election_lock import micro_time

from .controlplane import ControlPlane, eventually

pytestmark = pytest.mark.cluster

# Short durations: lease 2 s, renew deadline 1.5 s, retry 0.2 s.
SHORT = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.2}


@dataclass
class Replica:
    """One simulated controller replica: its own client, elector, and the IP it publishes."""

    elector: LeaderElector
    ip: str
    task: asyncio.Task[None] | None = None
    publisher: asyncio.Task[None] | None = None
    events: list[str] = field(default_factory=list)

    @property
    def identity(self) -> str:
        return self.elector.identity


class Replicas:
    def __init__(self, control_plane: ControlPlane, namespace: str) -> None:
        self._kubeconfig = control_plane.kubeconfig
        self._namespace = namespace
        self._clients: list[AsyncClient] = []
        self.started: list[Replica] = []

    def client(self) -> AsyncClient:
        client = AsyncClient(KubeConfig.from_file(self._kubeconfig))
        self._clients.append(client)
        return client

    def start(self, identity: str, ip: str, **kwargs: Any) -> Replica:
        client = self.client()
        settings = {**SHORT, **kwargs}
        replica = Replica(
            LeaderElector(client, self._namespace, LEASE_NAME, identity, **settings), ip
        )

        # What the kubelet reports of the replica's pod: followers read its IP.
        pod = stand_in_pod(client, namespace=self._namespace, name=identity, ip=ip,
                           service_account="default")  # fmt: skip
        replica.publisher = asyncio.create_task(pod)

        def started() -> None:
            replica.events.append("started")

        def stopped() -> None:
            replica.events.append("stopped")

        replica.task = replica.elector.start(started, stopped)
        self.started.append(replica)
        return replica

    async def close(self) -> None:
        for replica in self.started:
            for task in (replica.task, replica.publisher):
                if task is not None and not task.done():
                    task.cancel()
                    await asyncio.wait({task})
        for client in self._clients:
            await client.close()


@pytest.fixture
async def replicas(control_plane: ControlPlane, namespace: str) -> AsyncIterator[Replicas]:
    made = Replicas(control_plane, namespace)
    try:
        yield made
    finally:
        await made.close()


async def lease_record(kube: AsyncClient, namespace: str) -> LeaseRecord:
    return LeaseRecord.of(await kube.get(Lease, LEASE_NAME, namespace=namespace))


def may_write(replica: Replica) -> bool:
    """The replica's fence passes: it may make leader-only writes now."""
    try:
        replica.elector.fence()
    except NotLeaderError:
        return False
    return True


async def one_leader(*candidates: Replica) -> Replica:
    """Waits for a leader among ``candidates``; fails if two may ever write as leader at once."""

    async def check() -> Replica | None:
        leading = [replica for replica in candidates if may_write(replica)]
        assert len(leading) <= 1, f"two leaders: {[r.identity for r in leading]}"
        return leading[0] if leading else None

    return await eventually(check, what="one elector to lead", timeout=30)


async def test_one_of_two_leads_and_the_other_takes_over_after_a_kill(
    replicas: Replicas, kube: AsyncClient, namespace: str
) -> None:
    first = replicas.start("replica-a", "10.0.0.1", release_on_cancel=False)
    second = replicas.start("replica-b", "10.0.0.2", release_on_cancel=False)

    leader = await one_leader(first, second)
    follower = second if leader is first else first

    async def follower_sees_leader() -> bool:
        assert not follower.elector.is_leader
        return follower.elector.holder == leader.identity

    await eventually(follower_sees_leader, what="the follower to see the leader", timeout=30)
    with pytest.raises(NotLeaderError):
        follower.elector.fence()
    leader.elector.fence()
    record = await lease_record(kube, namespace)
    assert (record.holder, record.lease_duration_seconds) == (leader.identity, 2)

    async def leader_ip() -> str | None:
        ip = await read_leader_ip(kube, namespace, LEASE_NAME)
        return ip if ip == leader.ip else None

    await eventually(leader_ip, what="the leader's IP from the Lease holder's Pod", timeout=30)

    # kill -9: the task ends without releasing (the last record it wrote still names it).
    assert leader.task is not None
    leader.task.cancel()
    await asyncio.wait({leader.task})
    assert leader.elector.holder == leader.identity
    assert not leader.elector.is_leader

    new_leader = await one_leader(follower)
    assert new_leader is follower
    record = await lease_record(kube, namespace)
    assert record.holder == follower.identity
    assert record.transitions == 1
    follower.elector.fence()
    with pytest.raises(NotLeaderError):
        leader.elector.fence()

    async def new_leader_ip() -> str | None:
        ip = await read_leader_ip(kube, namespace, LEASE_NAME)
        return ip if ip == follower.ip else None

    await eventually(new_leader_ip, what="the new leader's IP in the ConfigMap", timeout=30)


async def test_a_released_lease_is_taken_over_without_waiting_for_it_to_expire(
    replicas: Replicas, kube: AsyncClient, namespace: str
) -> None:
    # A 60 s lease: a take-over within 20 s can only come from the release.
    slow = {"lease_duration": 60, "renew_deadline": 40, "retry_period": 0.2}
    first = replicas.start("replica-a", "10.0.0.1", **slow)
    await one_leader(first)
    second = replicas.start("replica-b", "10.0.0.2", **slow)

    async def second_sees_first() -> bool:
        return second.elector.holder == first.identity

    await eventually(second_sees_first, what="the follower to see the leader", timeout=30)

    assert await first.elector.release()

    assert first.events == ["started", "stopped"]
    assert not first.elector.leadership_lost.is_set()
    with pytest.raises(NotLeaderError):
        first.elector.fence()
    await one_leader(first, second)
    assert second.elector.is_leader
    record = await lease_record(kube, namespace)
    assert (record.holder, record.transitions) == (second.identity, 1)


async def test_a_leader_whose_lease_was_taken_loses_and_is_fenced(
    replicas: Replicas, kube: AsyncClient, namespace: str
) -> None:
    replica = replicas.start("replica-a", "10.0.0.1")
    await one_leader(replica)

    lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    now = datetime.now(UTC)
    lease.spec = LeaseSpec(
        holderIdentity="intruder",
        leaseDurationSeconds=60,
        acquireTime=micro_time(now),
        renewTime=micro_time(now),
        leaseTransitions=1,
    )
    await kube.replace(lease)

    await asyncio.wait_for(replica.elector.leadership_lost.wait(), timeout=30)

    assert not replica.elector.is_leader
    assert replica.events == ["started", "stopped"]
    with pytest.raises(NotLeaderError):
        replica.elector.fence()
    assert replica.task is not None
    await asyncio.wait_for(replica.task, timeout=30)  # run() returned
    assert (await lease_record(kube, namespace)).holder == "intruder"


async def test_timestamps_on_a_whole_second_are_accepted(
    replicas: Replicas, kube: AsyncClient, namespace: str
) -> None:
    """The API server's MicroTime needs six fraction digits, which isoformat() leaves out."""
    whole_second = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    replica = replicas.start("replica-a", "10.0.0.1", wall_clock=lambda: whole_second)

    await one_leader(replica)

    record = await lease_record(kube, namespace)
    assert record.holder == "replica-a"
    assert record.renew_time is not None
    assert record.renew_time.replace(microsecond=0) == whole_second
