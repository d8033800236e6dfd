"""The controller's reconcilers, registered by one list (`ControllerReconcilers.create`)."""

from __future__ import annotations

import time
from typing import Any
from unittest.mock import MagicMock

from tensorfusion.app.controller_informers import ControllerInformers
from tensorfusion.app.controller_reconcilers import ControllerReconcilers
from tensorfusion.controller.allocator_state import AllocatorState
from tensorfusion.controller.reconciler import Registration, register_handlers
from tensorfusion.domain.settings.controller_settings import ControllerSettings
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.runtime.informer import InformerEvent

NAMES = [
    "clusters", "gpu-nodes", "pools", "pods", "gpu-status", "quota-status", "taint",
    "replica-recount", "workloads", "provider-configs", "hypervisor-pods", "rollout", "problems",
]  # fmt: skip


def _wired() -> tuple[ControllerReconcilers, ControllerInformers]:
    client: Any = MagicMock()  # never called: nothing here runs
    caches = ControllerInformers.create(client, "tf-sys")
    state = AllocatorState(caches.caches(), IsolationPolicy.STATIC, time.time)
    reconcilers = ControllerReconcilers.create(
        client=client, fence=lambda: 1.0, state=state, settings=ControllerSettings(), caches=caches
    )
    reconcilers.register()
    return reconcilers, caches


def _handlers(source: Any) -> list[str]:
    return [f"{type(h.__self__).__name__}.{h.__name__}" for h in source._handlers]


def test_every_reconciler_runs_as_leader_work_in_registration_order() -> None:
    reconcilers, _ = _wired()
    assert [name for name, _ in reconcilers.work()] == NAMES
    assert [name for name, _ in reconcilers.writers()] == [n for n in NAMES
                                                           if n != "provider-configs"]  # fmt: skip
    assert [loop.name for loop in reconcilers.loops()] == [
        "tensorfusioncluster", "gpunode", "gpupool", "pod-release", "progressive-taint",
        "replica-recount", "workload-owner", "workload-collection", "hypervisor-pods", "rollout",
    ]  # fmt: skip


def test_the_pod_releaser_handles_a_worker_pod_first() -> None:
    _, caches = _wired()
    assert _handlers(caches.workers) == [
        "PodReleaser.on_pod", "ReplicaRecount.on_pod", "WorkloadLifecycle.on_pod",
        "ComponentRollout.on_client_pod",
    ]  # fmt: skip
    assert _handlers(caches.pools) == [
        "ClusterReconciler.on_pool", "GPUNodeReconciler.on_pool", "PoolStatusReconciler.on_pool",
        "HypervisorPodReconciler.on_pool", "ComponentRollout.on_pool",
    ]  # fmt: skip


def test_register_handlers_keeps_list_order() -> None:
    calls: list[str] = []

    class Source:
        def add_handler(self, handler: Any) -> None:
            calls.append(handler.__name__)

    class Reconciler:
        async def run(self) -> None:
            return None

    def first(event: InformerEvent) -> None:
        del event

    def second(event: InformerEvent) -> None:
        del event

    source = Source()
    register_handlers([
        Registration("a", Reconciler(), ((source, first),)),
        Registration("b", Reconciler(), ((source, second), (source, first))),
    ])  # fmt: skip
    assert calls == ["first", "second", "first"]
