"""The GPUPools a cluster wants, pool and cluster status and phases."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.capacity_figures import node_capacity
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.clusters import cluster_status, status_totals
from tensorfusion.domain.desired_state.objects import merge_patch
from tensorfusion.domain.desired_state.pools import (
    desired_pools,
    pool_phase,
    pool_status,
    pool_update,
    pools_to_delete,
)

from ..allocator.builders import gpu, request

NOW = "2027-01-15T08:00:00Z"
LATER = "2027-01-15T09:00:00Z"


def cluster(*entries: dict[str, Any], uid: str = "c-uid", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "TensorFusionCluster",
        "metadata": {"name": "tf", "uid": uid, "labels": {"team": "ml"}, **metadata},
        "spec": {"gpuPools": list(entries)},
    }


def entry(name: str, default: bool = False, ratio: int = 500) -> dict[str, Any]:
    template = {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": ratio}}}
    return {"name": name, "isDefault": default, "specTemplate": template}


def test_one_pool_per_entry_with_owner_labels_and_default_annotation() -> None:
    bodies = desired_pools(cluster(entry("shared", True), entry("train")))
    assert [b["metadata"]["name"] for b in bodies] == ["tf-shared", "tf-train"]
    shared = bodies[0]
    assert shared["metadata"]["labels"] == {"team": "ml", KEYS.managed_by: "tf"}
    assert shared["metadata"]["annotations"] == {KEYS.is_default_pool: "true"}
    assert bodies[1]["metadata"]["annotations"] == {KEYS.is_default_pool: "false"}
    owner = shared["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "TensorFusionCluster", "tf", "c-uid", True,
    )  # fmt: skip
    assert shared["spec"] == entry("shared")["specTemplate"]


def stored(body: dict[str, Any], **spec_extra: Any) -> dict[str, Any]:
    """The pool as the API server keeps it: a version, the CRD defaults, others' labels."""
    metadata = {**body["metadata"], "resourceVersion": "7", "uid": "p-uid"}
    metadata["labels"] = {**metadata["labels"], "extra": "kept"}
    spec = {**body["spec"], **spec_extra}
    spec["capacityConfig"] = {"oversubscription": {
        **spec["capacityConfig"]["oversubscription"],
        "vramExpandToHostMem": 50, "vramExpandToHostDisk": 70}}  # fmt: skip
    return {**body, "metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


def test_a_pool_is_updated_only_when_its_template_or_metadata_changed() -> None:
    body = desired_pools(cluster(entry("shared")))[0]
    current = stored(body)
    assert pool_update(current, body).body is None  # defaults alone are no change
    changed = desired_pools(cluster(entry("shared", ratio=300)))[0]
    update = pool_update(current, changed)
    assert update.body is not None
    assert update.body["spec"] == changed["spec"]
    assert update.body["metadata"]["resourceVersion"] == "7"
    assert update.body["metadata"]["labels"]["extra"] == "kept"
    assert "status" not in update.body
    flipped = desired_pools(cluster(entry("shared", default=True)))[0]
    update = pool_update(current, flipped)
    assert update.body is not None
    assert update.body["metadata"]["annotations"][KEYS.is_default_pool] == "true"


def test_a_pool_controlled_by_someone_else_is_left_alone_and_an_orphan_adopted() -> None:
    body = desired_pools(cluster(entry("shared")))[0]
    foreign = stored(body)
    foreign["metadata"]["ownerReferences"] = [{**body["metadata"]["ownerReferences"][0],
                                               "uid": "other", "name": "tf2"}]  # fmt: skip
    update = pool_update(foreign, body)
    assert update.body is None and "controlled by TensorFusionCluster tf2" in update.conflict
    orphan = stored(body)
    orphan["metadata"]["ownerReferences"] = []
    adopted = pool_update(orphan, body)
    assert adopted.body is not None
    assert [r["uid"] for r in adopted.body["metadata"]["ownerReferences"]] == ["c-uid"]


def test_only_owned_pools_of_removed_entries_are_deleted() -> None:
    owner = desired_pools(cluster(entry("shared"), entry("old")))
    pools = [stored(body) for body in owner]
    foreign = stored(desired_pools(cluster(entry("x"), uid="other"))[0])
    unowned = {"metadata": {"name": "tf-hand-made"}}
    now = cluster(entry("shared"))
    assert pools_to_delete(now, [*pools, foreign, unowned]) == ["tf-old"]
    assert pools_to_delete(cluster(), pools) == ["tf-old", "tf-shared"]


def test_no_pool_is_deleted_while_an_entry_does_not_read() -> None:
    pools = [stored(body) for body in desired_pools(cluster(entry("shared"), entry("old")))]
    unreadable = cluster(entry("shared"), {"name": "old", "specTemplate": "not a map"})
    assert [b["metadata"]["name"] for b in desired_pools(unreadable)] == ["tf-shared"]
    assert pools_to_delete(unreadable, pools) == []


def gpu_node(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def test_pool_phase_needs_a_running_node_and_none_provisioning() -> None:
    pool: dict[str, Any] = {"metadata": {"name": "p"}}
    assert pool_phase(pool, []).value == "Pending"
    assert pool_phase(pool, [gpu_node("a", "Pending")]).value == "Pending"
    assert pool_phase(pool, [gpu_node("a", "Running"), gpu_node("b", "Pending")]).value == "Running"
    running_and_provisioning = [gpu_node("a", "Running"), gpu_node("b", "Provisioning")]
    assert pool_phase(pool, running_and_provisioning).value == "Pending"
    deleting = {"metadata": {"name": "p", "deletionTimestamp": NOW}}
    assert pool_phase(deleting, [gpu_node("a", "Running")]).value == "Destroying"


def test_pool_status_sums_its_nodes_from_the_allocator_and_keeps_others_conditions() -> None:
    allocator = Allocator()
    allocator.set_pool(PoolSettings("p", oversubscription=OversubscriptionSettings(200, 0, 0)))
    for name, node in (("g1", "a"), ("g2", "a"), ("g3", "b")):
        allocator.upsert_gpu(gpu(name, node, pool="p"))
    allocator.assume(request("u1", ("12", "1Gi"), pool="p"), "a", ["g1"], 0.0)
    allocator.commit("u1", 0.0)
    capacities = {n: node_capacity(allocator, allocator.nodes[n]) for n in ("a", "b")}
    other = {"type": "Synced", "status": "True", "lastTransitionTime": NOW}
    pool = {"metadata": {"name": "p", "ownerReferences": [{"kind": "TensorFusionCluster",
            "name": "tf", "controller": True}]}, "status": {"conditions": [other]}}  # fmt: skip
    nodes = [gpu_node("a", "Running"), gpu_node("b", "Pending")]
    status = pool_status(pool, nodes, capacities, NOW)
    conditions = status.pop("conditions")
    assert status == {
        "cluster": "tf", "phase": "Running", "totalNodes": 2, "readyNodes": 1,
        "notReadyNodes": 1, "totalGPUs": 3, "runningAppsCnt": 1,
        "totalTFlops": "936", "totalVRAM": "240Gi",
        "availableTFlops": "924", "availableVRAM": "239Gi",
        "virtualTFlops": "1872", "virtualVRAM": "240Gi",
        "virtualAvailableTFlops": "1860", "virtualAvailableVRAM": "239Gi",
    }  # fmt: skip
    assert conditions[0] == other
    assert (conditions[1]["type"], conditions[1]["status"]) == ("Ready", "True")
    # Unchanged: the transition time is kept and nothing is written.
    written = {**status, "conditions": conditions}
    pool["status"] = written
    assert merge_patch(written, pool_status(pool, nodes, capacities, LATER)) == {}
    no_nodes = pool_status({"metadata": {"name": "p"}}, [], {}, NOW)
    assert no_nodes["phase"] == "Pending" and no_nodes["cluster"] is None
    assert no_nodes["conditions"][0]["reason"] == "NoNodes"


def pool_obj(name: str, phase: str, tflops: str, nodes: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {
        "phase": phase, "totalTFlops": tflops, "availableTFlops": "1500m",
        "totalVRAM": "80Gi", "totalNodes": nodes, "totalGPUs": 2 * nodes}}  # fmt: skip


def test_cluster_status_sums_its_pools_and_runs_when_every_pool_runs() -> None:
    tsdb = {"type": "TimeSeriesDatabaseReady", "status": "False", "reason": "Down",
            "lastTransitionTime": NOW}  # fmt: skip
    owner = cluster(entry("a"), entry("b"))
    owner["status"] = {"conditions": [tsdb]}
    pools = {"tf-a": pool_obj("tf-a", "Running", "10", 1),
             "tf-b": pool_obj("tf-b", "Running", "2500m", 2)}  # fmt: skip
    status = cluster_status(owner, pools, NOW)
    assert status["phase"] == "Running"  # a False condition never changes the phase
    assert (status["totalPools"], status["totalNodes"], status["totalGPUs"]) == (2, 3, 6)
    assert (status["totalTFlops"], status["availableTFlops"]) == ("12500m", "3")
    assert status["totalVRAM"] == "160Gi"
    assert status["readyGPUPools"] == ["tf-a", "tf-b"] and status["notReadyGPUPools"] == []
    types = [(c["type"], c["status"]) for c in status["conditions"]]
    assert types == [("TimeSeriesDatabaseReady", "False"), ("Ready", "True"),
                     ("GPUPoolReady", "True")]  # fmt: skip
    pending = cluster_status(owner, {**pools, "tf-b": pool_obj("tf-b", "Pending", "1", 1)}, NOW)
    assert pending["phase"] == "Pending" and pending["notReadyGPUPools"] == ["tf-b"]
    missing = cluster_status(owner, {**pools, "tf-b": None}, NOW)
    assert missing["phase"] == "Pending" and missing["notReadyGPUPools"] == ["tf-b"]
    assert cluster_status(cluster(), {}, NOW)["phase"] == "Pending"


def test_status_totals_read_quantities_and_skip_unreadable_ones() -> None:
    totals = status_totals({"status": {"totalTFlops": "1.5k", "totalVRAM": "1Gi",
                                       "availableVRAM": "lots"}})  # fmt: skip
    assert (totals.total_tflops, totals.total_vram, totals.available_vram) == (
        1_500_000, 2**30, 0,
    )  # fmt: skip
