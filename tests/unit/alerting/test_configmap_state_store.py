"""The ConfigMap alert state store against a fake API: round trip, caps, conflicts, fence."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import httpx
import orjson
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from prometheus_client import CollectorRegistry

from tensorfusion.alerting.configmap_state_store import (
    ConfigMapStateStore,
    alert_state_configmap_name,
    decode_state,
    state_dropped_counter,
)
from tensorfusion.alerting.state_store import MAX_STATE_ENTRIES, StateStoreError
from tensorfusion.runtime.leader_election import NotLeaderError


def api_error(code: int) -> ApiError:
    reason = {404: "NotFound", 409: "Conflict"}.get(code, "InternalError")
    return ApiError(
        status={"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                "reason": reason, "message": f"fake {code}"}
    )  # fmt: skip


class FakeConfigMaps:
    """ConfigMaps by (namespace, name) with resourceVersions, as the API server keeps them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], ConfigMap] = {}
        self.version = 0
        self.writes: list[str] = []
        self.before_write: Callable[[], None] | None = None
        self.fail_next: Exception | None = None

    def _stored(self, body: ConfigMap) -> ConfigMap:
        self.version += 1
        meta = body.metadata or ObjectMeta()
        stored = ConfigMap(
            metadata=ObjectMeta(name=meta.name, namespace=meta.namespace, labels=meta.labels,
                                resourceVersion=str(self.version)),
            data=dict(body.data or {}),
        )  # fmt: skip
        assert meta.namespace is not None and meta.name is not None
        self.objects[(meta.namespace, meta.name)] = stored
        return stored

    def _hooks(self) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()

    async def get(self, resource: Any, name: str, *, namespace: str) -> ConfigMap:
        assert resource is ConfigMap
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        found = self.objects.get((namespace, name))
        if found is None:
            raise api_error(404)
        return found

    async def create(self, body: ConfigMap) -> ConfigMap:
        self._hooks()
        assert body.metadata is not None
        if (body.metadata.namespace, body.metadata.name) in self.objects:
            raise api_error(409)
        self.writes.append("create")
        return self._stored(body)

    async def replace(self, body: ConfigMap) -> ConfigMap:
        self._hooks()
        assert body.metadata is not None and body.metadata.namespace and body.metadata.name
        current = self.objects.get((body.metadata.namespace, body.metadata.name))
        if current is None:
            raise api_error(404)
        assert current.metadata is not None
        if body.metadata.resourceVersion != current.metadata.resourceVersion:
            raise api_error(409)
        self.writes.append("replace")
        return self._stored(body)

    def edit(self, namespace: str, name: str, **data: str) -> None:
        """Someone else changes the ConfigMap (a new resourceVersion)."""
        current = self.objects[(namespace, name)]
        assert current.metadata is not None
        self._stored(ConfigMap(metadata=current.metadata, data={**(current.data or {}), **data}))


def record(fingerprint: str, starts_at: int, rule: str = "R", size: int = 0) -> dict[str, Any]:
    labels = {"alertname": rule, "x": "y" * size}
    return {"rule": rule, "fingerprint": fingerprint, "labels": labels, "annotations": {},
            "startsAt": starts_at, "lastSentAt": starts_at}  # fmt: skip


def make_store(
    api: FakeConfigMaps, fence: Callable[[], float] | None = None, **options: Any
) -> ConfigMapStateStore:
    return ConfigMapStateStore(
        cast(AsyncClient, api), "tf-sys", "tensor-fusion", fence=fence, **options
    )


async def test_round_trip_from_worker_threads_as_the_evaluator_calls_it() -> None:
    api = FakeConfigMaps()
    store = make_store(api)
    assert await asyncio.to_thread(store.load) == []
    records = [record("a", 1), record("b", 2)]
    await asyncio.to_thread(store.save, records)
    stored = api.objects[("tf-sys", "tensor-fusion-alert-state")]
    assert stored.metadata is not None and stored.metadata.labels
    assert stored.data is not None and orjson.loads(stored.data["state.json"])["version"] == 1
    assert sorted(r["fingerprint"] for r in await asyncio.to_thread(store.load)) == ["a", "b"]
    await asyncio.to_thread(store.save, [record("c", 3)])
    assert [r["fingerprint"] for r in await store.load_async()] == ["c"]
    assert api.writes == ["create", "replace"]
    assert alert_state_configmap_name("tf") == "tf-alert-state"


async def test_calling_the_blocking_methods_on_the_loop_is_refused_not_deadlocked() -> None:
    store = make_store(FakeConfigMaps())
    with pytest.raises(StateStoreError, match="worker thread"):
        store.load()


async def test_a_conflict_reads_again_keeps_other_keys_and_retries() -> None:
    api = FakeConfigMaps()
    store = make_store(api)
    await store.save_async([record("a", 1)])
    api.before_write = lambda: api.edit("tf-sys", "tensor-fusion-alert-state", note="kept")
    await store.save_async([record("b", 2)])
    stored = api.objects[("tf-sys", "tensor-fusion-alert-state")].data or {}
    assert stored["note"] == "kept"
    assert [r["fingerprint"] for r in decode_state(stored["state.json"], "x")] == ["b"]
    assert store.key.conflicts == 1


async def test_a_configmap_created_meanwhile_is_replaced_after_the_create_conflict() -> None:
    api = FakeConfigMaps()
    store = make_store(api)
    assert await store.load_async() == []

    def someone_creates() -> None:
        meta = ObjectMeta(name="tensor-fusion-alert-state", namespace="tf-sys")
        api._stored(ConfigMap(metadata=meta, data={"other": "1"}))

    api.before_write = someone_creates
    await store.save_async([record("a", 1)])
    assert api.writes == ["replace"]
    assert (api.objects[("tf-sys", "tensor-fusion-alert-state")].data or {})["other"] == "1"


async def test_a_refused_fence_writes_nothing_and_raises_state_store_error() -> None:
    api = FakeConfigMaps()

    def fence() -> float:
        raise NotLeaderError("replica-a does not hold the Lease")

    store = make_store(api, fence)
    with pytest.raises(StateStoreError, match="may not write as the leader"):
        await asyncio.to_thread(store.save, [record("a", 1)])
    assert api.writes == [] and api.objects == {}


@pytest.mark.parametrize(
    "failure",
    [api_error(500), httpx.ConnectError("connection refused"), TimeoutError()],
    ids=["api-500", "connection", "timeout"],
)
async def test_api_failures_become_state_store_errors(failure: Exception) -> None:
    api = FakeConfigMaps()
    store = make_store(api)
    api.fail_next = failure
    with pytest.raises(StateStoreError, match="read failed"):
        await asyncio.to_thread(store.load)
    api.fail_next = failure
    with pytest.raises(StateStoreError, match="write failed"):
        await asyncio.to_thread(store.save, [record("a", 1)])


async def test_unreadable_content_is_an_error_and_malformed_entries_are_skipped() -> None:
    api = FakeConfigMaps()
    store = make_store(api)
    await store.save_async([record("a", 1)])
    api.edit("tf-sys", "tensor-fusion-alert-state", **{"state.json": "{not json"})
    with pytest.raises(StateStoreError, match="not valid JSON"):
        await store.load_async()
    text = orjson.dumps({"firing": [record("a", 1), {"rule": "R"}, 5]}).decode()
    api.edit("tf-sys", "tensor-fusion-alert-state", **{"state.json": text})
    assert [r["fingerprint"] for r in await store.load_async()] == ["a"]


async def test_the_caps_keep_the_most_recently_started_and_count_what_they_drop() -> None:
    api = FakeConfigMaps()
    registry = CollectorRegistry()
    store = make_store(api, dropped=state_dropped_counter(registry))
    many = [record(f"f{i}", i) for i in range(MAX_STATE_ENTRIES + 5)]
    await store.save_async(many)
    kept = await store.load_async()
    assert len(kept) == MAX_STATE_ENTRIES
    assert min(r["startsAt"] for r in kept) == 5
    assert store.entries_dropped == 5
    assert registry.get_sample_value("tf_alert_state_entries_dropped_total") == 5
    big = [record(f"b{i}", i, size=2000) for i in range(600)]
    await store.save_async(big)
    text = (api.objects[("tf-sys", "tensor-fusion-alert-state")].data or {})["state.json"]
    assert len(text.encode()) <= 900 * 1024
    kept = await store.load_async()
    assert 0 < len(kept) < 600 and max(r["startsAt"] for r in kept) == 599
    assert store.entries_dropped == 5 + 600 - len(kept)
