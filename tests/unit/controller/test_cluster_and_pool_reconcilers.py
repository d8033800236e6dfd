"""TensorFusionCluster → GPUPools and cluster status; GPUPool status from its GPUNodes."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.controller.cluster_reconciler import ClusterReconciler
from tensorfusion.controller.pool_reconciler import PoolStatusReconciler
from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.informer_store import EventKind
from tensorfusion.runtime.leader_election import NotLeaderError

from .reconciler_fakes import (
    NOW,
    V1,
    FakeApi,
    FakeRecorder,
    Fence,
    allocator_state,
    event,
    gpu,
    gpu_node,
    pool,
    worker,
)


def cluster(*names: str, ratio: int = 500) -> dict[str, Any]:
    entries = [
        {"name": name, "isDefault": name == "shared",
         "specTemplate": {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": ratio}}}}
        for name in names
    ]  # fmt: skip
    return {"apiVersion": V1, "kind": "TensorFusionCluster", "metadata": {"name": "tf"},
            "spec": {"gpuPools": entries}}  # fmt: skip


def cluster_reconciler(api: FakeApi, fence: Fence, recorder: FakeRecorder) -> ClusterReconciler:
    return ClusterReconciler(
        clusters=api.cache("TensorFusionCluster"), pools=api.cache("GPUPool"), client=api,
        fence=fence, recorder=recorder, clock=lambda: NOW,
    )  # fmt: skip


def run_pool(api: FakeApi, name: str, tflops: str, nodes: int) -> None:
    obj = api.obj("GPUPool", name)
    api.put({**obj, "status": {"phase": "Running", "totalTFlops": tflops, "totalVRAM": "80Gi",
                               "totalNodes": nodes, "totalGPUs": nodes}})  # fmt: skip


async def test_a_cluster_gets_its_pools_and_its_status_follows_them() -> None:
    api, fence, recorder = FakeApi(), Fence(), FakeRecorder()
    uid = api.put(cluster("shared", "train"))["metadata"]["uid"]
    reconciler = cluster_reconciler(api, fence, recorder)
    assert await reconciler.reconcile("tf") is None
    shared = api.obj("GPUPool", "tf-shared")
    assert shared["metadata"]["annotations"] == {KEYS.is_default_pool: "true"}
    assert shared["metadata"]["ownerReferences"][0]["uid"] == uid
    assert api.obj("GPUPool", "tf-train")["metadata"]["annotations"] == {
        KEYS.is_default_pool: "false"
    }
    status = api.obj("TensorFusionCluster", "tf")["status"]
    assert (status["phase"], status["totalPools"]) == ("Pending", 2)
    assert status["notReadyGPUPools"] == ["tf-shared", "tf-train"]
    assert fence.calls >= len(api.writes())  # every write went through the fence
    assert recorder.reasons() == ["GPUPoolCreated", "GPUPoolCreated"]

    run_pool(api, "tf-shared", "312", 1)
    await reconciler.reconcile("tf")
    assert api.obj("TensorFusionCluster", "tf")["status"]["phase"] == "Pending"
    run_pool(api, "tf-train", "624", 2)
    await reconciler.reconcile("tf")
    status = api.obj("TensorFusionCluster", "tf")["status"]
    assert (status["phase"], status["totalTFlops"], status["totalNodes"]) == ("Running", "936", 3)
    writes = len(api.writes())
    await reconciler.reconcile("tf")
    assert len(api.writes()) == writes  # nothing changed, nothing written

    # A pool stops running: the cluster says which, once.
    api.put({**api.obj("GPUPool", "tf-train"), "status": {"phase": "Pending"}})
    await reconciler.reconcile("tf")
    assert api.obj("TensorFusionCluster", "tf")["status"]["phase"] == "Pending"
    assert recorder.events[-1].reason == "GPUPoolNotReady"
    assert "tf-train" in recorder.events[-1].message


async def test_template_changes_reach_the_pool_and_removed_entries_delete_it() -> None:
    api, fence, recorder = FakeApi(), Fence(), FakeRecorder()
    api.put(cluster("shared", "train"))
    reconciler = cluster_reconciler(api, fence, recorder)
    await reconciler.reconcile("tf")
    api.put({**api.obj("GPUPool", "tf-shared"),
             "metadata": {**api.obj("GPUPool", "tf-shared")["metadata"],
                          "labels": {"someone": "else", KEYS.managed_by: "tf"}}})  # fmt: skip
    api.put({**cluster("shared", ratio=300), "metadata": api.obj("TensorFusionCluster", "tf")[
        "metadata"]})  # fmt: skip
    await reconciler.reconcile("tf")
    shared = api.obj("GPUPool", "tf-shared")
    assert shared["spec"]["capacityConfig"]["oversubscription"]["tflopsOversellRatio"] == 300
    assert shared["metadata"]["labels"]["someone"] == "else"
    assert not api.has("GPUPool", "tf-train")
    assert "GPUPoolDeleted" in recorder.reasons()
    assert api.obj("TensorFusionCluster", "tf")["status"]["totalPools"] == 1


async def test_a_pool_event_leads_to_its_cluster_and_a_foreign_pool_is_reported() -> None:
    api, fence, recorder = FakeApi(), Fence(), FakeRecorder()
    api.put(cluster("shared"))
    api.put({"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": "tf-shared",
             "ownerReferences": [{"apiVersion": V1, "kind": "TensorFusionCluster",
                                  "name": "other", "uid": "x", "controller": True}]},
             "spec": {}})  # fmt: skip
    reconciler = cluster_reconciler(api, fence, recorder)
    reconciler.on_pool(event(api.obj("GPUPool", "tf-shared"), EventKind.DELETED))
    assert reconciler.loop.queue.depth == 1
    await reconciler.reconcile("tf")
    assert recorder.reasons() == ["GPUPoolConflict"]
    assert api.obj("GPUPool", "tf-shared")["spec"] == {}


async def test_a_cluster_stops_at_a_closed_fence() -> None:
    api, fence, recorder = FakeApi(), Fence(), FakeRecorder()
    api.put(cluster("shared"))
    fence.open = False
    reconciler = cluster_reconciler(api, fence, recorder)
    with pytest.raises(NotLeaderError):
        await reconciler.reconcile("tf")
    assert api.writes() == [] and recorder.events == []


# ---- pool status ---------------------------------------------------------------------------


def pool_world() -> FakeApi:
    api = FakeApi()
    api.put(pool("shared", capacityConfig={"oversubscription": {"tflopsOversellRatio": 200,
            "vramExpandToHostMem": 0, "vramExpandToHostDisk": 0}}))  # fmt: skip
    for name in ("n1", "n2"):
        api.put(gpu_node(name, "shared"))
    api.put(gpu("g1", "n1", available={"tflops": "0", "vram": "0"}))  # stored figure ignored
    api.put(gpu("g2", "n2"))
    api.put(worker("w1", "g1", "n1"))
    return api


async def test_pool_status_sums_its_nodes_from_memory_and_runs_with_a_running_node() -> None:
    api, fence, recorder = pool_world(), Fence(), FakeRecorder()
    state = allocator_state(api)
    reconciler = PoolStatusReconciler(
        pools=api.cache("GPUPool"), gpu_nodes=api.cache("GPUNode"), state=state, client=api,
        fence=fence, recorder=recorder, clock=lambda: NOW,
    )  # fmt: skip
    await reconciler.reconcile("shared")
    status = api.obj("GPUPool", "shared")["status"]
    assert (status["phase"], status["totalNodes"], status["readyNodes"]) == ("Pending", 2, 0)
    assert (status["totalTFlops"], status["availableTFlops"]) == ("624", "524")
    assert (status["virtualTFlops"], status["runningAppsCnt"], status["totalGPUs"]) == (
        "1248", 1, 2,
    )  # fmt: skip
    node = api.obj("GPUNode", "n1")
    api.put({**node, "status": {"phase": "Running"}})
    reconciler.on_gpu_node(event(api.obj("GPUNode", "n1"), EventKind.MODIFIED, node))
    assert reconciler.loop.queue.depth == 1
    await reconciler.reconcile("shared")
    assert api.obj("GPUPool", "shared")["status"]["phase"] == "Running"
    running = api.obj("GPUNode", "n1")
    api.put({**running, "status": {"phase": "Pending"}})
    await reconciler.reconcile("shared")
    assert api.obj("GPUPool", "shared")["status"]["phase"] == "Pending"
    assert recorder.reasons() == ["PoolNotReady"]


async def test_pool_status_waits_for_the_allocator() -> None:
    api = pool_world()
    reconciler = PoolStatusReconciler(
        pools=api.cache("GPUPool"), gpu_nodes=api.cache("GPUNode"),
        state=allocator_state(api, recover=False), client=api, fence=Fence(),
        recorder=None, clock=lambda: NOW,
    )  # fmt: skip
    assert await reconciler.reconcile("shared") == 1.0
    assert api.writes() == []
