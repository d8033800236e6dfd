"""Where followers find the leader: the Lease's holder, then that Pod's IP."""

from __future__ import annotations

import pytest
from lightkube.models.core_v1 import PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod

from tensorfusion.runtime.leader_election import read_leader_ip

from .test_leader_election_fakes import EPOCH, LEASE, NAMESPACE, FakeClient, FakeStore, api_error


def pod(store: FakeStore, name: str, ip: str | None, namespace: str = NAMESPACE) -> None:
    store.put(Pod(metadata=ObjectMeta(name=name, namespace=namespace),
                  status=PodStatus(podIP=ip)))  # fmt: skip


async def read(store: FakeStore) -> str | None:
    return await read_leader_ip(FakeClient(store).as_client(), NAMESPACE, LEASE)


async def test_the_holders_pod_ip_is_the_leaders_address() -> None:
    store = FakeStore()
    assert await read(store) is None, "no Lease"
    store.set_record("replica-a", renew_time=EPOCH)
    assert await read(store) is None, "no Pod of the holder"
    pod(store, "replica-a", None)
    assert await read(store) is None, "no IP yet"
    pod(store, "replica-a", "10.0.0.7")
    pod(store, "replica-b", "10.0.0.8")
    assert await read(store) == "10.0.0.7"
    store.set_record("replica-b", renew_time=EPOCH, transitions=1)
    assert await read(store) == "10.0.0.8"


async def test_a_config_map_or_a_pod_elsewhere_is_not_read() -> None:
    """The reference's leader-info ConfigMap, or a Pod of the holder's name in another
    namespace, name no leader."""
    store = FakeStore()
    store.put(ConfigMap(metadata=ObjectMeta(name="tensor-fusion-operator-leader-info",
                                            namespace=NAMESPACE),
                        data={"leader-ip": "10.6.6.6"}))  # fmt: skip
    store.set_record("replica-a", renew_time=EPOCH)
    pod(store, "replica-a", "10.6.6.6", namespace="default")
    assert await read(store) is None


async def test_read_errors_other_than_not_found_are_raised() -> None:
    store = FakeStore()
    store.set_record("replica-a", renew_time=EPOCH)
    client = FakeClient(store)
    client.fail["get"] = [api_error(500)]
    with pytest.raises(Exception, match="fake API error 500"):
        await read_leader_ip(client.as_client(), NAMESPACE, LEASE)
