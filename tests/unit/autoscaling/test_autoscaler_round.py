"""An autoscaler round on the real embedded store (DuckDB) and a real allocator: a workload whose
worker uses far less than it asked is resized in place (allocator, pod annotations, workload
status, an Event, the scale-down count); one that would not fit is left alone with a Warning;
a store that cannot answer changes nothing; a bad config is reported; a disabled one ignored."""

from __future__ import annotations

import time
from typing import Any, cast

from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.adapters.tsdb.store import MetricsStore, StoreUnavailableError
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.autoscaler import Autoscaler
from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.metrics.recorders import WorkerUsageSample, worker_usage_rows
from tensorfusion.domain.timestamps import format_rfc3339

from ...security.test_devplug_allocate import Events
from ..allocator.builders import POOL, allocator_with, gpu, request
from ..controller.reconciler_fakes import FakeApi

GIB = 1 << 30
NOW = time.time()


class Cache:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return next((i for i in self.items if i["metadata"]["name"] == name
                     and i["metadata"].get("namespace", "") == namespace), None)  # fmt: skip

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [i for i in self.items
                if namespace is None or i["metadata"].get("namespace") == namespace]  # fmt: skip


def _workload(name: str, auto: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "poolName": POOL,
        "resources": {
            "requests": {"tflops": "100", "vram": "20Gi"},
            "limits": {"tflops": "100", "vram": "20Gi"},
        },
    }
    if auto is not None:
        spec["autoScalingConfig"] = {"autoSetResources": auto}
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionWorkload",
            "metadata": {"name": name, "namespace": "ml", "uid": f"wl-{name}",
                         "creationTimestamp": format_rfc3339(NOW - 7200)},
            "spec": spec}  # fmt: skip


def _pod(name: str, workload: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ml", "uid": name,
                                        "labels": {KEYS.workload: workload}}}  # fmt: skip


def _usage_rows(workload: str, pod: str, tflops: float, vram: int, count: int = 100) -> list[Any]:
    rows = []
    for i in range(count):
        sample = WorkerUsageSample(worker=pod, namespace="ml", pool=POOL, node="n", uuid="a1",
                                   workload=workload, compute_percentage=tflops / 3.12,
                                   capacity_tflops=312.0, memory_bytes=vram,
                                   memory_limit_bytes=20 * GIB, usage_known=True)  # fmt: skip
        rows += worker_usage_rows([sample], int((NOW - i * 10) * 1000))
    return rows


class Setup:
    def __init__(
        self, *workloads: dict[str, Any], free_tflops: str = "312", workers: int = 1
    ) -> None:
        self.api = FakeApi()
        self.pods = [_pod(f"{w['metadata']['name']}-{i}", w["metadata"]["name"])
                     for w in workloads for i in range(workers)]  # fmt: skip
        for item in [*workloads, *self.pods]:
            self.api.put(item)
        self.allocator = allocator_with(gpu("a1", "n", capacity=(free_tflops, "80Gi")))
        for pod in self.pods:
            uid = pod["metadata"]["uid"]
            self.allocator.assume(request(uid, ("100", "20Gi"), limit=("100", "20Gi"),
                                          namespace="ml"), "n", ["a1"], now=0)  # fmt: skip
            self.allocator.commit(uid, now=0)
        self.database = DuckDBMetricsStore()
        self.store: MetricsStore = EmbeddedMetricsStore(self.database)
        self.events = Events()
        state = cast(AllocatorState, type("S", (), {"allocator": self.allocator})())
        self.autoscaler = Autoscaler(
            workloads=Cache(list(workloads)), pods=Cache(self.pods), pools=Cache([]),
            templates=Cache([]), state=state, store=self._store,
            writer=FencedWriter(self.api, _fence), recorder=self.events,
            clock=lambda: NOW)  # fmt: skip

    async def _store(self) -> MetricsStore:
        return self.store


def _fence() -> float:
    return 60.0


AUTO = {"enable": True, "initialDelayPeriod": "0s"}


async def test_an_over_requested_workload_is_resized_in_place() -> None:
    setup = Setup(_workload("infer", AUTO))
    setup.database.insert_rows(_usage_rows("infer", "infer-0", 20.0, 4 * GIB))
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "Resized", outcome.message
    record = setup.allocator.records["infer-0"].request
    assert record.request.tflops_milli == 23_000  # 20 TFLOPS x 1.15
    assert record.request.vram_bytes == -(-4 * GIB * 115 // 100)
    assert setup.allocator.gpus["a1"].available_tflops == 312_000 - 23_000
    annotations = setup.api.objects[("Pod", "ml", "infer-0")]["metadata"]["annotations"]
    assert annotations[KEYS.tflops_request] == "23" and annotations[KEYS.tflops_limit] == "23"
    status = setup.api.objects[("TensorFusionWorkload", "ml", "infer")]["status"]
    assert status["recommendation"]["requests"]["tflops"] == "23"
    assert status["conditions"][-1]["reason"] == "Resized"
    assert [reason for _, reason, _ in setup.events.recorded] == ["Resized"]
    assert setup.autoscaler.counts == {POOL: {"total_scale_down_cnt": 1}}
    assert await setup.autoscaler.round(setup.store) == []  # not due again within the interval


async def test_a_resize_that_does_not_fit_changes_nothing() -> None:
    auto = {**AUTO, "maxComputeResourcesRatio": "3"}
    setup = Setup(_workload("grow", auto), free_tflops="150")
    setup.database.insert_rows(_usage_rows("grow", "grow-0", 140.0, 20 * GIB))
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "ResizeDoesNotFit" and "nothing evicted" in outcome.message
    assert setup.allocator.records["grow-0"].request.request.tflops_milli == 100_000
    assert "annotations" not in setup.api.objects[("Pod", "ml", "grow-0")]["metadata"]
    assert [reason for _, reason, _ in setup.events.recorded] == ["ResizeDoesNotFit"]


class DownStore:
    dialect = EmbeddedMetricsStore(DuckDBMetricsStore()).dialect

    async def query(self, sql: str, timeout_s: float) -> Any:
        raise StoreUnavailableError("connection refused")


async def test_a_store_outage_changes_nothing_and_says_so() -> None:
    setup = Setup(_workload("infer", AUTO))
    [outcome] = await setup.autoscaler.round(cast(MetricsStore, DownStore()))
    assert outcome.reason == "MetricsUnavailable"
    assert setup.allocator.records["infer-0"].request.request.tflops_milli == 100_000
    status = setup.api.objects[("TensorFusionWorkload", "ml", "infer")]["status"]
    assert status["conditions"][-1]["status"] == "False"


async def test_a_bad_config_is_reported_and_a_disabled_one_ignored() -> None:
    setup = Setup(_workload("bad", {**AUTO, "marginFraction": "lots"}),
                  _workload("off", {"enable": False}), _workload("none", None))  # fmt: skip
    outcomes = await setup.autoscaler.round(setup.store)
    assert [(o.key[1], o.reason) for o in outcomes] == [("bad", "InvalidConfig")]
    assert "marginFraction" in outcomes[0].message


async def test_too_little_history_changes_nothing() -> None:
    setup = Setup(_workload("young", AUTO))
    setup.database.insert_rows(_usage_rows("young", "young-0", 20.0, GIB, count=5))
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "NoChange" and "fewer than 30" in outcome.message


async def test_a_cron_rule_applies_its_resources_then_they_are_restored() -> None:
    rule = {"name": "night", "enable": True, "start": "0 22 * * *", "end": "0 6 * * *",
            "desiredResources": {"requests": {"tflops": "50", "vram": "10Gi"},
                                 "limits": {"tflops": "50", "vram": "10Gi"}}}  # fmt: skip
    workload = _workload("nightly", None)
    workload["spec"]["autoScalingConfig"] = {"cronScalingRules": [rule]}
    setup = Setup(workload)
    night = 1_796_421_600.0  # 2026-12-04 22:00 UTC
    setup.autoscaler.clock = lambda: night
    [outcome] = await setup.autoscaler.round(setup.store)
    assert (outcome.reason, outcome.message) == ("Resized", "cron rule night started")
    assert setup.allocator.records["nightly-0"].request.request.tflops_milli == 50_000
    stored = setup.api.objects[("TensorFusionWorkload", "ml", "nightly")]
    assert stored["status"]["activeCronScalingRule"]["name"] == "night"
    workload["status"] = stored["status"]  # the informer's copy catches up
    [again] = await setup.autoscaler.round(setup.store)
    assert again.reason == "CronScaled"
    setup.autoscaler.clock = lambda: night + 9 * 3600  # 07:00: the rule has ended
    [ended] = await setup.autoscaler.round(setup.store)
    assert (ended.reason, ended.message) == ("Resized", "cron rule ended: resources restored")
    assert setup.allocator.records["nightly-0"].request.request.tflops_milli == 100_000
    status = setup.api.objects[("TensorFusionWorkload", "ml", "nightly")]["status"]
    assert "activeCronScalingRule" not in status


async def test_two_workers_that_fit_alone_but_not_together_are_both_left_alone() -> None:
    auto = {**AUTO, "maxComputeResourcesRatio": "3"}
    setup = Setup(_workload("pair", auto), free_tflops="312", workers=2)
    rows = _usage_rows("pair", "pair-0", 140.0, 20 * GIB) + _usage_rows("pair", "pair-1", 140.0,
                                                                          20 * GIB)  # fmt: skip
    setup.database.insert_rows(rows)
    [outcome] = await setup.autoscaler.round(setup.store)
    # 161 TFLOPS each: the first fits in the 112 free plus its own 100, the second does not.
    assert outcome.reason == "ResizeDoesNotFit", outcome.message
    records = setup.allocator.records
    assert [records[f"pair-{i}"].request.request.tflops_milli for i in range(2)] == [100_000] * 2
    assert setup.allocator.gpus["a1"].available_tflops == 112_000


async def test_a_setting_that_is_not_a_finite_number_is_reported() -> None:
    setup = Setup(_workload("nan", {**AUTO, "marginFraction": "NaN"}))
    [outcome] = await setup.autoscaler.round(setup.store)
    assert outcome.reason == "InvalidConfig" and "not a finite number" in outcome.message


async def test_an_unchanged_outcome_is_not_written_again() -> None:
    setup = Setup(_workload("young", AUTO))
    setup.database.insert_rows(_usage_rows("young", "young-0", 20.0, GIB, count=5))
    await setup.autoscaler.round(setup.store)
    writes = len([c for c in setup.api.calls if c.op == "patch"])
    setup.autoscaler.workloads.items[0]["status"] = setup.api.objects[  # type: ignore[attr-defined]
        ("TensorFusionWorkload", "ml", "young")
    ]["status"]
    setup.autoscaler.last_round.clear()
    await setup.autoscaler.round(setup.store)
    assert len([c for c in setup.api.calls if c.op == "patch"]) == writes
