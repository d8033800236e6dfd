"""Allocator views for the HTTP API and the independent copy (§3, §11, §16.2, §16.3)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import orjson

from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.allocator.allocator import Allocator, PoolSettings
from tensorfusion.domain.allocator.gpu_state import GPUState
from tensorfusion.domain.allocator.oversubscription import OversubscriptionSettings
from tensorfusion.domain.allocator.quota import QuotaCaps, QuotaSpec
from tensorfusion.domain.allocator.snapshot import (
    allocation_view,
    allocator_copy,
    nodes_view,
    pools_view,
    wants_progressive_taint,
)
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.domain.vocabulary import IsolationPolicy, PlacementMode, QoSLevel

from .builders import POOL, allocator_with, gpu, request, tflops, vram

NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
A100 = "NVIDIA A100-SXM4-80GB"


def a100(name: str, node: str, index: int, **options: Any) -> GPUState:
    state = gpu(name, node, index=index, model=A100, numa=0, **options)
    state.isolation_mode = "soft"
    return state


def pod(uid: str, name: str, *args: Any, workload: str = "", **kwargs: Any) -> AllocationRequest:
    """A request whose pod name and workload differ from the UID."""
    return dataclasses.replace(
        request(uid, *args, **kwargs), pod_name=name, workload=workload or name
    )


def example_allocator() -> Allocator:
    """The cluster of the §16.2 example: gpu-a1 holds p1 (100 TFLOPs, 20Gi), committed."""
    allocator = allocator_with(a100("gpu-a2", "node-a", 1), a100("gpu-a1", "node-a", 0))
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    allocator.set_quota(QuotaSpec("ml", "ml-quota"))
    p1 = pod(
        "uid-p1",
        "p1",
        ("100", "20Gi"),
        limit=("100", "20Gi"),
        namespace="ml",
        workload="trainer",
        qos=QoSLevel.HIGH,
    )
    allocator.assume(p1, "node-a", ["gpu-a1"], NOW - 5)
    allocator.commit("uid-p1", NOW)
    allocator.mark_running("uid-p1")
    return allocator


def dumps(body: Any) -> bytes:
    return orjson.dumps(body)


P1_AMOUNT = {"tflops": "100", "vram": "20Gi"}


def test_allocation_view_reproduces_the_spec_example() -> None:
    body = allocation_view(
        example_allocator(), ready=True, generated_at=NOW, max_worker_per_node=256
    )
    gpu_a2 = {
        "name": "gpu-a2",
        "node": "node-a",
        "pool": POOL,
        "phase": "Running",
        "usedBy": "tensor-fusion",
        "gpuModel": A100,
        "vendor": "NVIDIA",
        "index": 1,
        "numaNode": 0,
        "isolationMode": "soft",
        "activeIsolationMode": None,
        "capacity": {"tflops": "312", "vram": "80Gi"},
        "available": {"tflops": "312", "vram": "80Gi"},
        "effectiveAvailable": {"tflops": "312", "vram": "80Gi"},
        "pods": [],
    }
    expected = {
        "ready": True,
        "generatedAt": "2026-01-01T00:00:00Z",
        "isolationPolicy": "Dynamic",
        "maxWorkerPerNode": 256,
        "gpus": [
            {
                **gpu_a2,
                "name": "gpu-a1",
                "index": 0,
                "activeIsolationMode": "soft",
                "available": {"tflops": "212", "vram": "60Gi"},
                "effectiveAvailable": {"tflops": "212", "vram": "60Gi"},
                "pods": [
                    {
                        "uid": "uid-p1",
                        "namespace": "ml",
                        "name": "p1",
                        "state": "committed",
                        "request": P1_AMOUNT,
                        "limit": P1_AMOUNT,
                    }
                ],
            },
            gpu_a2,
        ],
        "nodes": [
            {
                "name": "node-a",
                "pool": POOL,
                "gpus": ["gpu-a1", "gpu-a2"],
                "committedWorkers": ["ml/p1"],
                "assumedWorkers": [],
                "pendingIndices": {},
            }
        ],
        "allocations": [
            {
                "uid": "uid-p1",
                "namespace": "ml",
                "name": "p1",
                "workload": "trainer",
                "pool": POOL,
                "node": "node-a",
                "gpus": ["gpu-a1"],
                "count": 1,
                "isolation": "soft",
                "qos": "high",
                "request": P1_AMOUNT,
                "limit": P1_AMOUNT,
                "gpuModel": None,
                "vendor": None,
                "gpuIndices": [],
                "partitionTemplateId": None,
                "state": "committed",
                "since": "2026-01-01T00:00:00Z",
                "expiresAt": None,
            }
        ],
        "quotas": [
            {
                "namespace": "ml",
                "quota": "ml-quota",
                "used": {"requests": P1_AMOUNT, "limits": P1_AMOUNT, "workers": 1},
                "assumed": {"requests": {}, "limits": {}, "workers": 0},
            }
        ],
    }
    # Same keys, values and key order as the spec's example.
    assert dumps(body) == dumps(expected)


def test_assumed_pods_show_expiry_pending_index_and_effective_available() -> None:
    allocator = example_allocator()
    p2 = pod("uid-p2", "p2", ("50", "8Gi"), namespace="ml", pod_index=7, gpu_indices=(0,))
    allocator.assume(p2, "node-a", ["gpu-a1"], NOW)
    body = allocation_view(allocator, ready=True, generated_at=NOW, max_worker_per_node=64)
    gpu_a1 = body["gpus"][0]
    assert gpu_a1["available"] == {"tflops": "212", "vram": "60Gi"}
    assert gpu_a1["effectiveAvailable"] == {"tflops": "162", "vram": "52Gi"}
    assert [(p["uid"], p["state"]) for p in gpu_a1["pods"]] == [
        ("uid-p1", "committed"),
        ("uid-p2", "assumed"),
    ]
    assert body["nodes"][0] | {"gpus": None} == {
        "name": "node-a",
        "pool": POOL,
        "gpus": None,
        "committedWorkers": ["ml/p1"],
        "assumedWorkers": ["ml/p2"],
        "pendingIndices": {"7": "ml/p2"},
    }
    p2_entry = body["allocations"][1]
    assert (p2_entry["state"], p2_entry["since"], p2_entry["expiresAt"]) == (
        "assumed",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:01:00Z",
    )
    assert (p2_entry["gpuIndices"], p2_entry["limit"]) == ([0], {})
    assert body["quotas"][0]["assumed"] == {
        "requests": {"tflops": "50", "vram": "8Gi"},
        "limits": {},
        "workers": 1,
    }


def test_pending_indices_are_ordered_by_index() -> None:
    allocator = allocator_with(gpu("g1", "n1"), gpu("g2", "n1"), gpu("g3", "n1"))
    for uid, index, name in (("u-a", 10, "g1"), ("u-b", 9, "g2"), ("u-c", 2, "g3")):
        allocator.assume(request(uid, pod_index=index), "n1", [name], NOW)
    body = allocation_view(allocator, ready=True, generated_at=NOW, max_worker_per_node=8)
    assert list(body["nodes"][0]["pendingIndices"].items()) == [
        ("2", "default/u-c"),
        ("9", "default/u-b"),
        ("10", "default/u-a"),
    ]


def test_not_ready_lists_are_empty() -> None:
    body = allocation_view(
        example_allocator(), ready=False, generated_at=NOW + 61, max_worker_per_node=256
    )
    assert body == {
        "ready": False,
        "generatedAt": "2026-01-01T00:01:01Z",
        "isolationPolicy": "Dynamic",
        "maxWorkerPerNode": 256,
        "gpus": [],
        "nodes": [],
        "allocations": [],
        "quotas": [],
    }


def test_times_go_through_the_given_formatter() -> None:
    allocator = allocator_with(gpu("g1", "n1"))
    allocator.assume(request("u1", ("1", "1Gi")), "n1", ["g1"], 12.5, ttl=30)
    body = allocation_view(
        allocator,
        ready=True,
        generated_at=40,
        max_worker_per_node=8,
        format_time=lambda seconds: f"t+{seconds:g}s",
    )
    assert body["generatedAt"] == "t+40s"
    assert (body["allocations"][0]["since"], body["allocations"][0]["expiresAt"]) == (
        "t+12.5s",
        "t+42.5s",
    )


def test_rfc3339_keeps_whole_seconds() -> None:
    assert format_rfc3339(0) == "1970-01-01T00:00:00Z"
    assert format_rfc3339(NOW + 59.999) == "2026-01-01T00:00:59Z"


def filtered_cluster() -> Allocator:
    """Two pools, two namespaces: node-a (pool-a) and node-b, node-c (pool-b)."""
    allocator = allocator_with(
        gpu("a1", "node-a", pool="pool-a"),
        gpu("b1", "node-b", pool="pool-b"),
        gpu("c1", "node-c", pool="pool-b"),
    )
    allocator.set_quota(QuotaSpec("ml", "ml-quota"))
    allocator.set_quota(QuotaSpec("web", "web-quota"))
    for uid, namespace, pool, node, name in (
        ("u-ml-a", "ml", "pool-a", "node-a", "a1"),
        ("u-web-a", "web", "pool-a", "node-a", "a1"),
        ("u-ml-b", "ml", "pool-b", "node-b", "b1"),
    ):
        asked = request(uid, ("10", "1Gi"), namespace=namespace, pool=pool)
        allocator.assume(asked, node, [name], NOW)
    allocator.commit("u-ml-b", NOW)
    return allocator


def names(body: dict[str, Any]) -> dict[str, list[str]]:
    return {
        "gpus": [g["name"] for g in body["gpus"]],
        "gpuPods": [p["uid"] for g in body["gpus"] for p in g["pods"]],
        "nodes": [n["name"] for n in body["nodes"]],
        "workers": [w for n in body["nodes"] for w in n["committedWorkers"] + n["assumedWorkers"]],
        "allocations": [a["uid"] for a in body["allocations"]],
        "quotas": [q["namespace"] for q in body["quotas"]],
    }


def view(
    allocator: Allocator,
    node: str | None = None,
    pool: str | None = None,
    namespace: str | None = None,
) -> dict[str, list[str]]:
    body = allocation_view(
        allocator,
        ready=True,
        generated_at=NOW,
        max_worker_per_node=8,
        node=node,
        pool=pool,
        namespace=namespace,
    )
    return names(body)


def test_filters_select_by_node_pool_and_namespace() -> None:
    allocator = filtered_cluster()
    assert view(allocator) == {
        "gpus": ["a1", "b1", "c1"],
        "gpuPods": ["u-ml-a", "u-web-a", "u-ml-b"],
        "nodes": ["node-a", "node-b", "node-c"],
        "workers": ["ml/u-ml-a", "web/u-web-a", "ml/u-ml-b"],
        "allocations": ["u-ml-a", "u-ml-b", "u-web-a"],
        "quotas": ["ml", "web"],
    }
    assert view(allocator, node="node-a") == {
        "gpus": ["a1"],
        "gpuPods": ["u-ml-a", "u-web-a"],
        "nodes": ["node-a"],
        "workers": ["ml/u-ml-a", "web/u-web-a"],
        "allocations": ["u-ml-a", "u-web-a"],
        "quotas": ["ml", "web"],
    }
    assert view(allocator, pool="pool-b") == {
        "gpus": ["b1", "c1"],
        "gpuPods": ["u-ml-b"],
        "nodes": ["node-b", "node-c"],
        "workers": ["ml/u-ml-b"],
        "allocations": ["u-ml-b"],
        "quotas": ["ml", "web"],
    }
    assert view(allocator, namespace="web") == {
        "gpus": ["a1"],
        "gpuPods": ["u-web-a"],
        "nodes": ["node-a"],
        "workers": ["web/u-web-a"],
        "allocations": ["u-web-a"],
        "quotas": ["web"],
    }
    assert view(allocator, namespace="ml", pool="pool-a") == {
        "gpus": ["a1"],
        "gpuPods": ["u-ml-a"],
        "nodes": ["node-a"],
        "workers": ["ml/u-ml-a"],
        "allocations": ["u-ml-a"],
        "quotas": ["ml"],
    }
    assert view(allocator, node="node-z") == {
        "gpus": [],
        "gpuPods": [],
        "nodes": [],
        "workers": [],
        "allocations": [],
        "quotas": ["ml", "web"],
    }


# ---- nodes and pools -------------------------------------------------------------------------


def test_progressive_taint_follows_committed_usage_only() -> None:
    allocator = allocator_with(
        gpu("a1", "node-a"), gpu("a2", "node-a"), gpu("b1", "node-b"), gpu("c1", "node-c")
    )
    nodes = allocator.nodes
    assert not wants_progressive_taint(nodes["node-a"])
    allocator.assume(request("vram-only", ("0", "1Gi")), "node-a", ["a2"], NOW)
    assert not wants_progressive_taint(nodes["node-a"])  # assumed: not yet
    allocator.commit("vram-only", NOW)
    assert wants_progressive_taint(nodes["node-a"])
    allocator.assume(request("tflops-only", ("1", "0")), "node-b", ["b1"], NOW)
    assert not wants_progressive_taint(nodes["node-b"])
    allocator.commit("tflops-only", NOW)
    assert wants_progressive_taint(nodes["node-b"])
    allocator.release("vram-only")
    assert not wants_progressive_taint(nodes["node-a"])
    allocator.remove_gpu("c1")
    assert not wants_progressive_taint(nodes["node-c"])  # no GPU objects


def test_nodes_view() -> None:
    allocator = allocator_with(
        gpu("a1", "node-a"),
        gpu("a2", "node-a", capacity=("100", "24Gi")),
        gpu("b1", "node-b", pool="other"),
        gpu("c1", "node-c"),
        pools=(PoolSettings(POOL, oversubscription=OversubscriptionSettings(200, 50, 0)),),
    )
    allocator.set_node_facts("node-a", ram_bytes=vram("64Gi"), disk_bytes=0, hypervisor_index0=5)
    allocator.set_node_facts("node-b", ram_bytes=0, disk_bytes=0, hypervisor_index0=0)
    allocator.assume(request("p", ("100", "10Gi"), limit=("150", "20Gi")), "node-a", ["a1"], NOW)
    allocator.commit("p", NOW)
    allocator.assume(request("q", ("10", "1Gi")), "node-c", ["c1"], NOW)
    body = nodes_view(allocator)
    assert body == {
        "nodes": [
            {
                "name": "node-a",
                "pool": POOL,
                "agentReady": True,
                "tainted": True,
                "gpus": ["a1", "a2"],
                "workers": 1,
                "capacity": {"tflops": "412", "vram": "104Gi"},
                "available": {"tflops": "312", "vram": "94Gi"},
                "virtual": {"tflops": "824", "vram": "136Gi"},
                "virtualAvailable": {"tflops": "674", "vram": "116Gi"},
            },
            {
                "name": "node-b",
                "pool": "other",
                "agentReady": False,
                "tainted": False,
                "gpus": ["b1"],
                "workers": 0,
                "capacity": {"tflops": "312", "vram": "80Gi"},
                "available": {"tflops": "312", "vram": "80Gi"},
                "virtual": {"tflops": "312", "vram": "80Gi"},
                "virtualAvailable": {"tflops": "312", "vram": "80Gi"},
            },
            {
                "name": "node-c",
                "pool": POOL,
                "agentReady": True,
                "tainted": False,
                "gpus": ["c1"],
                "workers": 1,
                "capacity": {"tflops": "312", "vram": "80Gi"},
                "available": {"tflops": "312", "vram": "80Gi"},
                "virtual": {"tflops": "624", "vram": "80Gi"},
                "virtualAvailable": {"tflops": "624", "vram": "80Gi"},
            },
        ]
    }
    assert [n["name"] for n in nodes_view(allocator, pool="other")["nodes"]] == ["node-b"]
    assert nodes_view(allocator, pool="nowhere") == {"nodes": []}


def test_a_node_without_gpus_still_shows_its_workers() -> None:
    allocator = allocator_with(gpu("a1", "node-a"))
    allocator.assume(request("p", ("1", "1Gi")), "node-a", ["a1"], NOW)
    allocator.remove_gpu("a1")
    (entry,) = nodes_view(allocator)["nodes"]
    assert (entry["name"], entry["pool"], entry["gpus"], entry["workers"]) == (
        "node-a",
        None,
        [],
        1,
    )
    assert (entry["capacity"], entry["tainted"]) == ({}, False)


def test_pools_view_includes_known_pools_without_nodes() -> None:
    allocator = allocator_with(
        gpu("a1", "node-a"),
        gpu("b1", "node-b"),
        gpu("x1", "node-x", pool="other"),
        pools=(
            PoolSettings("empty", placement_mode=PlacementMode.LOW_LOAD_FIRST),
            PoolSettings(POOL, oversubscription=OversubscriptionSettings(300, 0, 0)),
        ),
    )
    allocator.assume(request("p", ("12", "4Gi")), "node-a", ["a1"], NOW)
    allocator.commit("p", NOW)
    allocator.assume(request("q", ("1", "1Gi")), "node-b", ["b1"], NOW)
    body = pools_view(allocator)
    default_mode = PoolSettings("x").placement_mode.value
    assert body == {
        "pools": [
            {
                "name": "empty",
                "placementMode": "LowLoadFirst",
                "nodes": 0,
                "gpus": 0,
                "workers": 0,
                "capacity": {},
                "available": {},
                "virtual": {},
                "virtualAvailable": {},
            },
            {
                "name": "other",
                "placementMode": default_mode,
                "nodes": 1,
                "gpus": 1,
                "workers": 0,
                "capacity": {"tflops": "312", "vram": "80Gi"},
                "available": {"tflops": "312", "vram": "80Gi"},
                "virtual": {"tflops": "312", "vram": "80Gi"},
                "virtualAvailable": {"tflops": "312", "vram": "80Gi"},
            },
            {
                "name": POOL,
                "placementMode": default_mode,
                "nodes": 2,
                "gpus": 2,
                "workers": 2,
                "capacity": {"tflops": "624", "vram": "160Gi"},
                "available": {"tflops": "612", "vram": "156Gi"},
                "virtual": {"tflops": "1872", "vram": "160Gi"},
                "virtualAvailable": {"tflops": "1860", "vram": "156Gi"},
            },
        ]
    }


# ---- the copy --------------------------------------------------------------------------------


def busy_allocator() -> Allocator:
    allocator = filtered_cluster()
    allocator.isolation_policy = IsolationPolicy.DYNAMIC
    allocator.set_pool(
        PoolSettings("pool-b", PlacementMode.LOW_LOAD_FIRST, OversubscriptionSettings())
    )
    allocator.set_node_facts("node-a", ram_bytes=1, disk_bytes=2, hypervisor_index0=3)
    allocator.assume(request("u-pending", ("1", "1Gi"), pod_index=4), "node-c", ["c1"], NOW)
    allocator.commit("u-pending", NOW)
    return allocator


def everything(allocator: Allocator) -> bytes:
    """Every view of the allocator, as bytes."""
    return dumps(
        [
            allocation_view(allocator, ready=True, generated_at=NOW, max_worker_per_node=8),
            nodes_view(allocator),
            pools_view(allocator),
            {uid: (r.since, r.expires_at, r.pending) for uid, r in allocator.records.items()},
            {name: sorted(members) for name, members in allocator.pool_members.items()},
        ]
    )


def mutable_ids(root: object) -> set[int]:
    """Ids of every mutable object reachable from `root` through dataclass fields and
    containers."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            found.add(id(obj))
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | set):
            found.add(id(obj))
            stack.extend(obj)
        elif isinstance(obj, tuple | frozenset):
            stack.extend(obj)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            if not obj.__dataclass_params__.frozen:  # type: ignore[attr-defined]
                found.add(id(obj))
            stack.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
    return found


def test_the_copy_equals_the_original_and_shares_nothing_mutable() -> None:
    original = busy_allocator()
    original.changes("reader").take_nodes()
    copy = allocator_copy(original)
    for f in dataclasses.fields(Allocator):
        if f.name != "_changes":
            assert getattr(copy, f.name) == getattr(original, f.name), f.name
    assert not mutable_ids(original) & mutable_ids(copy)
    for state in copy.nodes.values():
        assert all(g is copy.gpus[g.name] for g in state.gpus)
    assert everything(copy) == everything(original)


def test_changing_the_copy_never_changes_the_original() -> None:
    original = busy_allocator()
    cursor = original.changes("reader")
    cursor.take_nodes()
    cursor.take_gpus()
    before = everything(original)
    copy = allocator_copy(original)
    copy.assume(request("new", ("5", "1Gi"), namespace="ml", pool="pool-b"), "node-c", ["c1"], NOW)
    copy.commit("new", NOW + 1)
    copy.commit("u-ml-a", NOW + 1)
    copy.mark_running("u-pending")
    copy.release("u-ml-b")
    copy.expire_assumptions(NOW + 3600)
    copy.set_quota(QuotaSpec("ml", "other", total_requests=QuotaCaps(tflops=tflops("1"))))
    copy.set_node_facts("node-a", ram_bytes=9, disk_bytes=9, hypervisor_index0=0)
    copy.upsert_gpu(gpu("a1", "node-a", pool="pool-a", capacity=("1", "1Gi")))
    copy.upsert_gpu(gpu("d1", "node-d", pool="pool-a"))
    copy.remove_gpu("b1")
    copy.set_pool(PoolSettings("pool-a", PlacementMode.LOW_LOAD_FIRST))
    assert everything(copy) != before
    assert everything(original) == before
    assert original.quotas["ml"].spec.name == "ml-quota"
    assert not cursor.pending()


def test_changing_the_original_never_changes_the_copy() -> None:
    original = busy_allocator()
    copy = allocator_copy(original)
    before = everything(copy)
    original.commit("u-web-a", NOW)
    original.release("u-ml-b")
    original.remove_gpu("c1")
    assert everything(copy) == before


def test_node_facts_that_did_not_change_do_not_mark_the_node() -> None:
    allocator = filtered_cluster()
    cursor = allocator.changes("test", unique=True)
    cursor.take_nodes()
    allocator.set_node_facts("node-a", ram_bytes=1, disk_bytes=2, hypervisor_index0=3)
    assert cursor.take_nodes() == {"node-a"}
    allocator.set_node_facts("node-a", ram_bytes=1, disk_bytes=2, hypervisor_index0=3)
    assert cursor.take_nodes() == set(), "a heartbeat with the same facts is no change"
    allocator.set_node_facts("node-a", ram_bytes=1, disk_bytes=2, hypervisor_index0=4)
    assert cursor.take_nodes() == {"node-a"}
