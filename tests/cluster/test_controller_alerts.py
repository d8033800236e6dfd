"""The controller's alert and metrics parts against the real API server: the ConfigMap alert
state across a leader change, the Kubernetes event sink, and condition
TimeSeriesDatabaseReady on a TensorFusionCluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Event
from lightkube.types import PatchType

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.alerting.configmap_state_store import ConfigMapStateStore
from tensorfusion.alerting.kube_event_sink import KubernetesEventSink
from tensorfusion.alerting.leader_service import LeaderAlertService
from tensorfusion.alerting.replica_config import ReplicaConfig
from tensorfusion.alerting.state_store import StateStoreError
from tensorfusion.controller.tsdb_condition import (
    CONDITION_TYPE,
    ClusterConditionWriter,
    StoreCondition,
)
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.settings.controller_flags import ControllerFlags
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource
from tensorfusion.runtime.leader_election import NotLeaderError

from .controller_replicas import install_crds
from .controlplane import ControlPlane, eventually

pytestmark = pytest.mark.cluster

CLUSTER = resource_of("TensorFusionCluster")


@dataclass
class Process:
    """What the alert service reads of a controller replica; `leading` drives the fence."""

    client: AsyncClient
    env: ControllerEnvironment
    flags: ControllerFlags = field(default_factory=lambda: ControllerFlags(enable_alert=True))
    leading: bool = True

    def fence(self) -> float:
        if not self.leading:
            raise NotLeaderError(f"{self.env.pod_name} lost the Lease")
        return 10.0

    def is_leader(self) -> bool:
        return self.leading


@dataclass
class Targets:
    received: list[AlertNotice] = field(default_factory=list)

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.received.extend(notices)

    async def start(self) -> None:
        """Nothing to start."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def status(self) -> list[dict[str, Any]]:
        return []


def write_config(directory: Path, rules: list[dict[str, Any]]) -> None:
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": rules}))
    os.replace(temporary, directory / "config.yaml")


def always(count: int = 3) -> dict[str, Any]:
    return {"name": "AlwaysFiring", "query": "SELECT 'node-a' AS node",
            "evaluationInterval": "1s", "consecutiveCount": count, "severity": "P2",
            "alertTargetInstance": "{{ .node }}"}  # fmt: skip


async def state_records(kube: AsyncClient, namespace: str) -> list[dict[str, Any]] | None:
    try:
        found = await kube.get(ConfigMap, "tf-it-alert-state", namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    text = (found.data or {}).get("state.json")
    if not text:
        return None
    firing: list[dict[str, Any]] = orjson.loads(text)["firing"]
    return firing


async def test_the_alert_state_lives_in_a_configmap_across_a_leader_change(
    kube: AsyncClient, namespace: str, tmp_path: Path
) -> None:
    write_config(tmp_path, [always()])
    database = DuckDBMetricsStore()
    store = EmbeddedMetricsStore(database)

    async def the_store() -> EmbeddedMetricsStore:
        return store

    env = ControllerEnvironment(release_fullname="tf-it", namespace=namespace, pod_name="a")
    targets: list[Targets] = []

    async def term(process: Process) -> tuple[ReplicaConfig, asyncio.Task[None]]:
        config = ReplicaConfig(tmp_path / "config.yaml", events=_NoEvents(), poll_interval_s=0.1)
        await config.start()
        made = Targets()
        targets.append(made)
        service = LeaderAlertService(config, store=the_store, targets_factory=lambda p: made,
                                     max_first_delay_s=0.0, persist_interval_s=0.2)  # fmt: skip
        return config, asyncio.create_task(service.work(process))

    first = Process(kube, env)
    config, work = await term(first)
    try:
        records = await eventually(lambda: state_records(kube, namespace),
                                   what="the firing set in the ConfigMap")  # fmt: skip
        [saved] = records
        assert saved["rule"] == "AlwaysFiring" and saved["labels"]["node"] == "node-a"
        cm = await kube.get(ConfigMap, "tf-it-alert-state", namespace=namespace)
        assert cm.metadata is not None and cm.metadata.labels
        assert cm.metadata.labels["app.kubernetes.io/component"] == "alert-state"
        # More evaluations: the firing entry in memory differs from the saved one now
        # (lastSentAt), so a last save would change the ConfigMap.
        seen = evaluations(config)

        async def evaluated_twice() -> bool:
            return evaluations(config) >= seen + 2

        await eventually(evaluated_twice, what="two more evaluations")
        # The Lease is lost: the fence refuses, the old leader writes nothing more.
        first.leading = False
        before = cm.metadata.resourceVersion
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        await config.stop()
        after = await kube.get(ConfigMap, "tf-it-alert-state", namespace=namespace)
        assert after.metadata is not None and after.metadata.resourceVersion == before
        # The new leader loads the state before its first evaluation.
        config, work = await term(Process(kube, replace(env, pod_name="b")))

        async def resent() -> AlertNotice | None:
            return next((n for n in targets[1].received if not n.resolved), None)

        notice = await eventually(resent, what="the second leader's first notice")
        assert notice.starts_at_ms == saved["startsAt"], "restored, not fired anew"
        assert not any(n.resolved for n in targets[1].received)
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        await config.stop()
        await store.close()
        database.close()


def evaluations(config: ReplicaConfig) -> float:
    labels = {"rule": "AlwaysFiring", "result": "ok"}
    return config.metrics.registry.get_sample_value("tf_alert_evaluations_total", labels) or 0.0


class _NoEvents:
    def warning(self, reason: str, message: str) -> None:
        del reason, message


async def test_conflicting_edits_are_kept_and_a_refused_fence_writes_nothing(
    kube: AsyncClient, namespace: str
) -> None:
    leading = [True]

    def fence() -> float:
        if not leading[0]:
            raise NotLeaderError("not the leader")
        return 10.0

    store = ConfigMapStateStore(kube, namespace, "tf-it", fence=fence)
    record = {"rule": "R", "fingerprint": "f1", "labels": {"alertname": "R"}, "annotations": {},
              "startsAt": 1, "lastSentAt": 1}  # fmt: skip
    await asyncio.to_thread(store.save, [record])
    # Someone edits the ConfigMap: the store's resourceVersion is stale now.
    await kube.patch(ConfigMap, "tf-it-alert-state", {"data": {"note": "mine"}},
                     namespace=namespace, patch_type=PatchType.MERGE)  # fmt: skip
    await asyncio.to_thread(store.save, [{**record, "fingerprint": "f2"}])
    found = await kube.get(ConfigMap, "tf-it-alert-state", namespace=namespace)
    assert (found.data or {})["note"] == "mine" and store.key.conflicts == 1
    assert [r["fingerprint"] for r in await asyncio.to_thread(store.load)] == ["f2"]
    leading[0] = False
    with pytest.raises(StateStoreError, match="leader"):
        await asyncio.to_thread(store.save, [])
    assert [r["fingerprint"] for r in await store.load_async()] == ["f2"]


@pytest.fixture
async def cluster_object(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str
) -> AsyncIterator[str]:
    await install_crds(control_plane)
    name = f"tfc-{namespace}"
    await kube.create(CLUSTER(metadata=ObjectMeta(name=name), spec={"gpuPools": []}))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(CLUSTER, name)


@pytest.fixture
async def clusters(kube: AsyncClient, cluster_object: str) -> AsyncIterator[Informer]:
    informer = Informer(LightkubeSource(kube, CLUSTER), name="TensorFusionCluster")
    task = asyncio.create_task(informer.run())
    try:
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_bad_rule_is_a_warning_event_on_the_cluster(
    kube: AsyncClient, clusters: Informer, cluster_object: str, tmp_path: Path
) -> None:
    bad = {**always(), "name": "BadInterval", "evaluationInterval": "1.5h"}
    write_config(tmp_path, [always(), bad])
    sink = KubernetesEventSink(EventRecorder(kube, "tensor-fusion-controller"), clusters,
                               cluster_name=cluster_object)  # fmt: skip
    config = ReplicaConfig(tmp_path / "config.yaml", events=sink, poll_interval_s=0.1)
    await config.start()
    try:

        async def warning() -> Event | None:
            async for event in kube.list(Event, namespace="default"):
                involved = event.involvedObject
                if involved.name == cluster_object and event.reason == "AlertRuleInvalid":
                    return event
            return None

        event = await eventually(warning, what="the AlertRuleInvalid Event")
        assert event.type == "Warning" and event.involvedObject.kind == "TensorFusionCluster"
        assert "BadInterval" in (event.message or "") and "1.5h" in (event.message or "")
        assert sink.written == 1 and sink.skipped == 0
    finally:
        await config.stop()
        await sink.drain()


async def _condition(kube: AsyncClient, name: str) -> dict[str, Any] | None:
    found = (await kube.get(CLUSTER, name)).to_dict()  # type: ignore[no-untyped-call]
    for condition in (found.get("status") or {}).get("conditions") or []:
        if condition.get("type") == CONDITION_TYPE:
            return dict(condition)
    return None


async def test_the_store_condition_in_the_cluster_status(
    kube: AsyncClient, clusters: Informer, cluster_object: str
) -> None:
    # Another writer's condition and phase are already there.
    other = {"type": "Ready", "status": "True", "reason": "PoolsRunning", "message": "ok",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    await kube.patch(CLUSTER.Status, cluster_object,
                     {"status": {"phase": "Running", "conditions": [other]}},
                     patch_type=PatchType.MERGE)  # fmt: skip
    await clusters.wait_synced()
    writer = ClusterConditionWriter(kube, clusters, lambda: 10.0)
    up = StoreCondition("True", "Embedded", "embedded DuckDB store /tsdb/metrics-x.duckdb")

    def published(condition: StoreCondition) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            await writer.publish(condition)
            current = await _condition(kube, cluster_object)
            return current is not None and condition.same_as(current)

        return check

    await eventually(published(up), what="the condition True")
    first = await _condition(kube, cluster_object)
    assert first is not None and first["reason"] == "Embedded" and first["lastTransitionTime"]
    down = StoreCondition("False", "WriteFailed", "/tsdb/metrics-x.duckdb: disk full")
    await eventually(published(down), what="the condition False")
    found = (await kube.get(CLUSTER, cluster_object)).to_dict()  # type: ignore[no-untyped-call]
    conditions = {c["type"]: c for c in found["status"]["conditions"]}
    assert conditions["Ready"] == other, "another writer's condition was changed"
    assert found["status"]["phase"] == "Running"
    assert conditions[CONDITION_TYPE]["status"] == "False"
    assert conditions[CONDITION_TYPE]["message"] == "/tsdb/metrics-x.duckdb: disk full"
    writes = writer.patches
    # The same failure with a new text, once the cache has caught up, is no transition.
    await eventually(published(StoreCondition("False", "WriteFailed", "again")),
                     what="no rewrite for the same failure")  # fmt: skip
    assert writer.patches == writes

    def fenced() -> float:
        raise NotLeaderError("lost")

    refused = ClusterConditionWriter(kube, clusters, fenced)
    assert await refused.publish(up) == 0
    current = await _condition(kube, cluster_object)
    assert current is not None and current["status"] == "False"
