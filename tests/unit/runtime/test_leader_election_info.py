"""The leader-info ConfigMap: the fenced write of the leader's IP and the followers' read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from tensorfusion.runtime.leader_election import (
    LEADER_INFO_CONFIGMAP,
    NotLeaderError,
    publish_leader_ip,
    read_leader_ip,
)

from .test_leader_election_fakes import NAMESPACE, FakeClient, FakeStore, api_error


def leader_info(store: FakeStore) -> dict[str, str] | None:
    data = store.get(("ConfigMap", NAMESPACE, LEADER_INFO_CONFIGMAP))
    return None if data is None else dict(data.get("data") or {})


def sleeper(slept: list[float]) -> Callable[[float], Awaitable[None]]:
    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    return sleep


class Fence:
    """Passes ``passes`` times, then raises as a leader that lost would."""

    def __init__(self, passes: int = 1_000) -> None:
        self.passes = passes
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls > self.passes:
            raise NotLeaderError("lost")
        return 10.0


async def test_the_leader_writes_its_ip_and_a_follower_reads_it() -> None:
    store = FakeStore()
    client = FakeClient(store)
    assert await read_leader_ip(client.as_client(), NAMESPACE) is None

    await publish_leader_ip(client.as_client(), NAMESPACE, "10.0.0.7", fence=Fence())
    assert leader_info(store) == {"leader-ip": "10.0.0.7"}
    assert await read_leader_ip(client.as_client(), NAMESPACE) == "10.0.0.7"

    await publish_leader_ip(client.as_client(), NAMESPACE, "10.0.0.8", fence=Fence())
    assert await read_leader_ip(client.as_client(), NAMESPACE) == "10.0.0.8"


async def test_an_existing_config_map_is_updated_and_its_other_keys_kept() -> None:
    store = FakeStore()
    store.put(
        ConfigMap(
            metadata=ObjectMeta(name=LEADER_INFO_CONFIGMAP, namespace=NAMESPACE),
            data={"leader-ip": "10.0.0.1", "other": "kept"},
        )
    )

    await publish_leader_ip(FakeClient(store).as_client(), NAMESPACE, "10.0.0.2", fence=Fence())

    assert leader_info(store) == {"leader-ip": "10.0.0.2", "other": "kept"}


async def test_a_process_that_is_not_the_leader_writes_nothing() -> None:
    store = FakeStore()
    client = FakeClient(store)

    with pytest.raises(NotLeaderError):
        await publish_leader_ip(client.as_client(), NAMESPACE, "10.0.0.7", fence=Fence(0))

    assert client.calls == []
    assert leader_info(store) is None


async def test_api_errors_are_retried_each_behind_the_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore()
    client = FakeClient(store)
    client.fail["apply"] = [api_error(500), api_error(409)]
    slept: list[float] = []
    fence = Fence()

    await publish_leader_ip(
        client.as_client(), NAMESPACE, "10.0.0.7", fence=fence, retry_period=2, sleep=sleeper(slept)
    )

    assert client.calls == ["apply", "apply", "apply"]
    assert fence.calls == 3
    assert slept == [2, 2]
    assert leader_info(store) == {"leader-ip": "10.0.0.7"}
    assert "fake API error 500" in caplog.text


async def test_retries_stop_when_leadership_is_lost() -> None:
    store = FakeStore()
    client = FakeClient(store)
    client.fail_always = api_error(503)

    publishing = publish_leader_ip(
        client.as_client(), NAMESPACE, "10.0.0.7", fence=Fence(3), sleep=sleeper([])
    )
    with pytest.raises(NotLeaderError):
        await asyncio.wait_for(publishing, timeout=30)
    assert client.calls == ["apply"] * 3


async def test_an_empty_pod_ip_is_refused() -> None:
    with pytest.raises(ValueError, match="POD_IP"):
        await publish_leader_ip(FakeClient(FakeStore()).as_client(), NAMESPACE, "", fence=Fence())


async def test_read_errors_other_than_not_found_are_raised() -> None:
    client = FakeClient(FakeStore())
    client.fail["get"] = [api_error(500)]
    with pytest.raises(Exception, match="fake API error 500"):
        await read_leader_ip(client.as_client(), NAMESPACE)
