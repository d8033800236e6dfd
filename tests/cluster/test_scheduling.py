"""Scheduling through the leader's child kube-scheduler and the extender (scheduling.md §12, §15).

A controller replica (`-agent-readiness heartbeat`) runs the testenv's kube-scheduler as its
child; fake GPU nodes get their GPUs and heartbeats from a node-agent fixture; worker pods are
created as the webhook writes them (`schedulerName`, pool and request annotations, an index
resource). The pod lands where the allocator says, `gpu-ids` is on the pod before its Binding,
and deleting it releases the GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient

from tensorfusion.devenv.replica_pods import STAND_IN_LABEL
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    derive_kube_scheduler_config,
)
from tensorfusion.domain.scheduling.scheduler_config import (
    scheduler_name,
)

from .conftest import DeleteLater
from .controller_replicas import Replica, Start, holder
from .controlplane import ControlPlane, eventually
from .gpu_usage import over_committed
from .nodes import FakeGpuNodes
from .test_controller_process import keep_beating
from .test_controller_reconcilers import (
    GPU,
    GPU_NODE,
    POD,
    POOL,
    V1,
    apply_crds,
    play_node_agent,
    read,
    status,
)

pytestmark = pytest.mark.cluster


@dataclass
class GpuCluster:
    """A pool, its nodes with their GPUs (beating), and the leading replica."""

    pool: str
    nodes: list[str]
    gpus: dict[str, list[str]]
    leader: Replica
    followers: list[Replica]


def webhook_worker(name: str, namespace: str, pool: str, tflops: str, vram: str,
                   index: int) -> Any:  # fmt: skip
    """A worker pod as the admission webhook leaves it."""
    resource, value = encode_index(index)
    return POD.from_dict({
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {KEYS.component: "worker", KEYS.enabled: "true"},
            "annotations": {KEYS.gpupool: pool, KEYS.tflops_request: tflops,
                            KEYS.vram_request: vram, KEYS.tflops_limit: tflops,
                            KEYS.vram_limit: vram},
            "finalizers": [KEYS.finalizer],
        },
        "spec": {
            "schedulerName": scheduler_name(),
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {resource: str(value)}}}],
        },
    })  # fmt: skip


@contextlib.asynccontextmanager
async def gpu_cluster(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    *,
    nodes: int = 2,
    gpus_per_node: int = 2,
    followers: int = 0,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[GpuCluster]:
    await apply_crds(control_plane, kube)
    run = secrets.token_hex(3)
    pool = f"tf-{run}-pool"
    names = [n.metadata.name for n in await fake_gpu_nodes(nodes, labels={"tf-run": run})
             if n.metadata and n.metadata.name]  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    spec = {"nodeManagerConfig": {"nodeSelector": selector}}
    await kube.create(POOL({"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": pool},
                            "spec": spec}))  # fmt: skip
    cluster_objects(POOL, pool)
    gpus = {node: [f"gpu-{run}-{i}-{g}" for g in range(gpus_per_node)]
            for i, node in enumerate(names)}  # fmt: skip
    for node, node_gpus in gpus.items():
        cluster_objects(GPU_NODE, node)
        for name in node_gpus:
            cluster_objects(GPU, name)
    flags = ("-leader-elect", "-agent-readiness", "heartbeat")
    leader = replicas("replica-s", *flags, env=env)

    async def gpu_nodes() -> bool:
        return all([await read(kube, GPU_NODE, n) is not None for n in names])

    await eventually(gpu_nodes, what="the GPUNodes", components=[leader.component])
    for node, node_gpus in gpus.items():
        await play_node_agent(kube, node, pool, node_gpus)
    beats = [asyncio.create_task(keep_beating(kube, n, gpus_per_node)) for n in names]
    try:

        async def pool_running() -> bool:
            leads = await holder(kube, namespace) == "replica-s"
            return leads and status(await read(kube, POOL, pool)).get("phase") == "Running"

        await eventually(pool_running, what="the pool Running", components=[leader.component])
        others = [replicas(f"replica-s{i}", *flags, env=env) for i in range(followers)]
        yield GpuCluster(pool, names, gpus, leader, others)
    finally:
        for task in beats:
            task.cancel()


async def allocations(replica: Replica, namespace: str) -> list[dict[str, Any]]:
    code, text = await replica.get(f"/api/allocation?namespace={namespace}")
    assert code == 200, text
    found: list[dict[str, Any]] = json.loads(text)["allocations"]
    return found


SIZES = [("20", "4Gi"), ("50", "10Gi"), ("100", "16Gi"), ("150", "30Gi"), ("30", "40Gi")]


async def create_mixed_workers(kube: AsyncClient, namespace: str, pool: str, count: int) -> None:
    """`count` webhook-shaped workers of the mixed SIZES, indices cycling through 1..128."""
    for i in range(count):
        tflops, vram = SIZES[i % len(SIZES)]
        await kube.create(webhook_worker(f"w{i:03d}", namespace, pool, tflops, vram, i % 128 + 1))


async def all_bound(
    kube: AsyncClient, namespace: str, count: int, leader: Replica
) -> list[dict[str, Any]]:
    """Every worker pod of the namespace (not the replicas' stand-ins) once `count` of them are
    bound."""

    async def bound() -> list[dict[str, Any]] | None:
        listed = [p.to_dict() async for p in kube.list(POD, namespace=namespace)]
        pods = [p for p in listed if STAND_IN_LABEL not in (p["metadata"].get("labels") or {})]
        return pods if sum(1 for p in pods if p["spec"].get("nodeName")) == count else None

    found: list[dict[str, Any]] = await eventually(
        bound, what=f"{count} workers bound", timeout=180, components=[leader.component]
    )
    return found


def assert_within_capacity(pods: list[dict[str, Any]], gpus: dict[str, list[str]]) -> None:
    """No GPU holds more than 312 TFLOPs or 80Gi by the pods' own annotations, and every pod's
    GPUs are on its node."""
    for pod in pods:
        gpu_ids = pod["metadata"]["annotations"][KEYS.gpu_ids].split(",")
        assert all(g in gpus[pod["spec"]["nodeName"]] for g in gpu_ids), pod
    assert over_committed(pods) == {}


async def records_match(replica: Replica, namespace: str, pods: list[dict[str, Any]]) -> bool:
    """Whether `/api/allocation` holds exactly the pods' committed records."""
    records = {r["name"]: (r["node"], r["gpus"], r["state"])
               for r in await allocations(replica, namespace)}  # fmt: skip
    return records == {
        p["metadata"]["name"]: (p["spec"]["nodeName"],
                                p["metadata"]["annotations"][KEYS.gpu_ids].split(","),
                                "committed")
        for p in pods
    }  # fmt: skip


async def gpu_warnings(control_plane: ControlPlane, namespace: str, pod: str) -> list[Any]:
    """The FailedGPUScheduling events of a pod."""
    events = json.loads(await control_plane.kubectl(
        "get", "events", "-n", namespace, "-o", "json"))["items"]  # fmt: skip
    return [e for e in events if e["involvedObject"]["name"] == pod
            and e["reason"] == "FailedGPUScheduling"]  # fmt: skip


async def test_a_worker_lands_on_the_allocators_choice_with_gpu_ids_before_its_binding(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects) as cluster:  # fmt: skip
        seen: list[dict[str, Any]] = []

        async def watch() -> None:
            async for _, pod in kube.watch(POD, namespace=namespace):
                seen.append(pod.to_dict())

        watcher = asyncio.create_task(watch())
        try:
            await kube.create(webhook_worker("w0", namespace, cluster.pool, "100", "10Gi", 1))

            async def bound() -> dict[str, Any] | None:
                pod = await read(kube, POD, "w0", namespace)
                return pod if pod and pod["spec"].get("nodeName") else None

            pod = await eventually(bound, what="w0 bound", timeout=60,
                                   components=[cluster.leader.component])  # fmt: skip
        finally:
            watcher.cancel()
        # The annotations travel in the Binding: no version of the pod has one without the other.
        first_bound = next(p for p in seen if p["spec"].get("nodeName"))
        assert KEYS.gpu_ids in (first_bound["metadata"].get("annotations") or {}), (
            "the pod was bound before its gpu-ids were written"
        )
        early = [p for p in seen if KEYS.gpu_ids in (p["metadata"].get("annotations") or {})
                 and not p["spec"].get("nodeName")]  # fmt: skip
        assert not early, "the pod carried gpu-ids before it was bound"
        node, gpu_ids = pod["spec"]["nodeName"], pod["metadata"]["annotations"][KEYS.gpu_ids]
        assert node in cluster.nodes and gpu_ids in cluster.gpus[node]
        [record] = await allocations(cluster.leader, namespace)
        assert (record["node"], record["gpus"]) == (node, [gpu_ids])

        async def allocated_event() -> bool:  # written off the bind's path
            events = await control_plane.kubectl("get", "events", "-n", namespace, "-o", "json")
            return "GPUDeviceAllocated" in {e["reason"] for e in json.loads(events)["items"]
                                            if e["involvedObject"]["name"] == "w0"}  # fmt: skip

        await eventually(allocated_event, what="the GPUDeviceAllocated Event of w0",
                         components=[cluster.leader.component])  # fmt: skip
        log = cluster.leader.component.log_path.read_text()
        assert "binding of pod" not in log, "the Binding was not taken as posted"

        await kube.delete(POD, "w0", namespace=namespace, grace_period=0)

        async def released() -> bool:
            return await allocations(cluster.leader, namespace) == []

        await eventually(released, what="w0 released", components=[cluster.leader.component])


async def test_an_impossible_worker_stays_pending_with_one_warning_summary(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, nodes=1, gpus_per_node=1) as cluster:  # fmt: skip
        await kube.create(webhook_worker("huge", namespace, cluster.pool, "1000", "10Gi", 1))

        async def warned() -> list[dict[str, Any]] | None:
            return await gpu_warnings(control_plane, namespace, "huge") or None

        [event] = await eventually(warned, what="the FailedGPUScheduling event",
                                   components=[cluster.leader.component])  # fmt: skip
        assert event["type"] == "Warning"
        assert event["message"].startswith("0/1 nodes are available: 1 GPUResourceFilter")
        pod = await read(kube, POD, "huge", namespace)
        assert pod is not None and not pod["spec"].get("nodeName")
        assert await allocations(cluster.leader, namespace) == []


async def test_200_mixed_workers_on_20_nodes_never_overcommit_a_gpu(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, nodes=20, gpus_per_node=8) as cluster:  # fmt: skip
        await create_mixed_workers(kube, namespace, cluster.pool, 200)
        pods = await all_bound(kube, namespace, 200, cluster.leader)
        assert_within_capacity(pods, cluster.gpus)

        async def matches() -> bool:
            return await records_match(cluster.leader, namespace, pods)

        await eventually(matches, what="200 committed records equal to the pods",
                         components=[cluster.leader.component])  # fmt: skip


async def test_a_pending_worker_is_bound_once_another_releases_the_gpu(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, nodes=1, gpus_per_node=1) as cluster:  # fmt: skip
        await kube.create(webhook_worker("first", namespace, cluster.pool, "300", "10Gi", 1))

        async def bound(name: str) -> bool:
            pod = await read(kube, POD, name, namespace)
            return bool(pod and pod["spec"].get("nodeName"))

        await eventually(lambda: bound("first"), what="first bound",
                         components=[cluster.leader.component])  # fmt: skip
        await kube.create(webhook_worker("second", namespace, cluster.pool, "300", "10Gi", 2))

        async def warned() -> bool:
            return bool(await gpu_warnings(control_plane, namespace, "second"))

        await eventually(warned, what="second pending for GPUs",
                         components=[cluster.leader.component])  # fmt: skip
        await kube.delete(POD, "first", namespace=namespace, grace_period=0)
        await eventually(lambda: bound("second"), what="second bound within 45 s", timeout=45,
                         components=[cluster.leader.component])  # fmt: skip


DERIVED = Path(__file__).resolve().parents[1] / "unit" / "scheduling" / "data" / "derived"


@pytest.mark.parametrize("name", ["default", "guide-tuned", "multipoint"])
async def test_the_real_kube_scheduler_starts_from_each_derived_configuration(
    control_plane: ControlPlane, tmp_path: Path, name: str
) -> None:
    """The golden inputs, derived as the controller derives them, accepted by kube-scheduler
    (it refuses unknown plugins, arguments and fields at start)."""
    config = yaml.safe_load((DERIVED / f"{name}.input.yaml").read_text())
    derived, _ = derive_kube_scheduler_config(
        config, extender_url="http://127.0.0.1:1/scheduler", managed_resources=["nvidia.com/gpu"],
        kubeconfig=str(control_plane.kubeconfig),
    )  # fmt: skip
    scheduler = await control_plane.start_scheduler(derived, tmp_path, name=f"ks-{name}")
    try:
        assert scheduler.exit_code is None
    finally:
        scheduler.stop()


def native_gpu_pod(name: str, namespace: str) -> Any:
    """A pod of the NVIDIA device plugin's kind, sent to our scheduler during a migration."""
    return POD.from_dict({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulerName": scheduler_name(), "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })  # fmt: skip


async def test_progressive_migration_keeps_native_pods_off_nodes_with_workers(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    env = {"NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION": "true"}
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, env=env) as cluster:  # fmt: skip

        async def node_of(name: str) -> str | None:
            pod = await read(kube, POD, name, namespace)
            return (pod or {}).get("spec", {}).get("nodeName") or None

        await kube.create(webhook_worker("tf", namespace, cluster.pool, "50", "5Gi", 1))
        worker_node = await eventually(lambda: node_of("tf"), what="the worker bound",
                                       components=[cluster.leader.component])  # fmt: skip
        for i in range(3):
            await kube.create(native_gpu_pod(f"native-{i}", namespace))
        for i in range(3):
            native_node = await eventually(lambda i=i: node_of(f"native-{i}"),  # type: ignore[misc]
                                           what=f"native-{i} bound",
                                           components=[cluster.leader.component])  # fmt: skip
            assert native_node != worker_node
        events = json.loads(await control_plane.kubectl(
            "get", "events", "-n", namespace, "-o", "json"))["items"]  # fmt: skip
        assert any(e["reason"] == "ScheduleWithNativeGPU" for e in events)


async def test_kill_9_of_the_leader_while_200_workers_arrive(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    async with gpu_cluster(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                           cluster_objects, nodes=20, gpus_per_node=8,
                           followers=1) as cluster:  # fmt: skip
        [follower] = cluster.followers

        async def leaders_child() -> int | None:
            return child_pid(cluster.leader)

        old_child = await eventually(leaders_child, what="the leader's child",
                                     components=[cluster.leader.component])  # fmt: skip

        creating = asyncio.create_task(create_mixed_workers(kube, namespace, cluster.pool, 200))
        try:

            async def some_bound() -> bool:
                pods = [p async for p in kube.list(POD, namespace=namespace)]
                return sum(1 for p in pods if p.spec and p.spec.nodeName) >= 30

            await eventually(some_bound, what="30 workers bound by the first leader",
                             components=[cluster.leader.component])  # fmt: skip
            cluster.leader.component.kill()

            async def child_gone() -> bool:
                return not pid_alive(old_child)

            await eventually(child_gone, what="the old leader's kube-scheduler gone", timeout=10)

            async def follower_leads() -> bool:
                return await holder(kube, namespace) == follower.component.name

            await eventually(follower_leads, what="the follower leading within 20 s",
                             timeout=20, components=[follower.component])  # fmt: skip
            await creating
        finally:
            if not creating.done():
                creating.cancel()

        pods = await all_bound(kube, namespace, 200, follower)
        assert_within_capacity(pods, cluster.gpus)

        async def matches() -> bool:
            return await records_match(follower, namespace, pods)

        await eventually(matches, what="/api/allocation equal to the pods",
                         components=[follower.component])  # fmt: skip


def child_pid(replica: Replica) -> int | None:
    """The pid of the replica's child kube-scheduler, from its log."""
    for line in replica.component.log_path.read_text(errors="replace").splitlines():
        if "kube-scheduler started (pid " in line:
            return int(line.rsplit("(pid ", 1)[1].rstrip(")"))
    return None


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
