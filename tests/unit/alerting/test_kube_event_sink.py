"""The Kubernetes event sink: Warning Events on the right TensorFusionCluster, plus the log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.alerting.kube_event_sink import KubernetesEventSink, cluster_target


class Clusters:
    """A TensorFusionCluster cache that syncs when told to."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.synced = asyncio.Event()

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return next((obj for obj in self.objects if obj["metadata"]["name"] == name), None)

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return list(self.objects)

    async def wait_synced(self) -> None:
        await self.synced.wait()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[InvolvedObject, str, str, str]] = []

    async def record(self, involved: InvolvedObject, type_: Any, reason: str, message: str) -> None:
        self.events.append((involved, type_, reason, message))


def cluster(name: str, created: str, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created, "uid": uid or f"uid-{name}"}}


def test_the_named_cluster_or_else_the_oldest_one_is_the_target() -> None:
    clusters = Clusters(
        cluster("b", "2026-01-02T00:00:00Z"),
        cluster("a", "2026-01-03T00:00:00Z"),
        cluster("c", "2026-01-01T00:00:00Z"),
    )
    oldest = cluster_target(clusters)
    assert oldest == InvolvedObject("TensorFusionCluster", "c", uid="uid-c",
                                    api_version="tensor-fusion.ai/v1")  # fmt: skip
    named = cluster_target(clusters, "a")
    assert named is not None and named.name == "a"
    assert cluster_target(clusters, "missing") is None
    assert cluster_target(Clusters()) is None


async def test_a_warning_is_logged_at_once_and_written_once_the_cache_synced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clusters = Clusters(cluster("main", "2026-01-01T00:00:00Z"))
    recorder = Recorder()
    sink = KubernetesEventSink(recorder, clusters)
    with caplog.at_level(logging.WARNING, logger="tensorfusion.events"):
        sink.warning("AlertRuleInvalid", "alert rule #1 (Bad): bad interval")
    assert "reason=AlertRuleInvalid" in caplog.text
    await asyncio.sleep(0)
    assert recorder.events == []  # the cache has not synced yet
    clusters.synced.set()
    await sink.drain()
    [(involved, type_, reason, message)] = recorder.events
    assert (involved.kind, involved.name, type_, reason) == (
        "TensorFusionCluster", "main", "Warning", "AlertRuleInvalid",
    )  # fmt: skip
    assert message == "alert rule #1 (Bad): bad interval"
    assert (sink.reported, sink.written, sink.skipped) == (1, 1, 0)


async def test_without_a_cluster_the_report_stays_a_log_line() -> None:
    clusters = Clusters()
    clusters.synced.set()
    recorder = Recorder()
    sink = KubernetesEventSink(recorder, clusters, cluster_name="prod")
    sink.warning("DynamicConfigInvalid", "config.yaml: not valid YAML")
    await sink.drain()
    assert recorder.events == [] and sink.skipped == 1


def test_outside_an_event_loop_nothing_is_written_and_nothing_raises() -> None:
    sink = KubernetesEventSink(Recorder(), Clusters())
    sink.warning("AlertRuleInvalid", "x")
    assert sink.skipped == 1
