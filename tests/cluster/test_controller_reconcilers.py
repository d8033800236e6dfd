"""The leader's reconcilers against a real API server.

A TensorFusionCluster, fake GPU nodes, GPU objects and GPUNode heartbeats written as node agents
write them; the reconcilers run with an AllocatorState fed by real informers, and the test
watches GPUPool, GPUNode, GPU and TensorFusionCluster reach Running with the right figures, a
worker pod with `gpu-ids` change them (GPU `status.available` too, the node tainted), its
deletion release it and remove its finalizer, and a removed pool entry delete its GPUPool.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from tensorfusion.adapters.kube.client import make_client
from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.kube.events import EventRecorder
from tensorfusion.adapters.kube.object_client import LightkubeObjects
from tensorfusion.controller.allocator_state import AllocatorState, StateCaches
from tensorfusion.controller.cluster_reconciler import ClusterReconciler
from tensorfusion.controller.gpu_node_reconciler import GPUNodeReconciler
from tensorfusion.controller.node_taint import ProgressiveTaintReconciler
from tensorfusion.controller.pod_release import PodReleaser
from tensorfusion.controller.pool_reconciler import PoolStatusReconciler
from tensorfusion.controller.status_writeback import GPUStatusWriter
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.model import KINDS
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.runtime.informer import Informer
from tensorfusion.runtime.informer_lightkube import LightkubeSource
from tensorfusion.runtime.supervision import Supervisor

from .controlplane import ControlPlane, eventually
from .nodes import FakeGpuNodes

pytestmark = pytest.mark.cluster

CRDS = Path(__file__).resolve().parents[2] / "charts" / "tensor-fusion" / "crds"
V1 = "tensor-fusion.ai/v1"
# Typed as Any: lightkube's overloads want models where the test writes plain dicts.
CLUSTER: Any = resource_of("TensorFusionCluster")
POOL: Any = resource_of("GPUPool")
GPU_NODE: Any = resource_of("GPUNode")
GPU: Any = resource_of("GPU")
POD: Any = Pod
NODE: Any = Node
TAINT = {"key": KEYS.used_by, "value": "tensor-fusion", "effect": "PreferNoSchedule"}


async def apply_crds(control_plane: ControlPlane, kube: AsyncClient) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        await control_plane.kubectl("apply", "--server-side", "-f", str(path))

    async def established() -> bool:
        for info in KINDS:
            crd = await kube.get(CustomResourceDefinition, info.crd_name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    await eventually(established, what="the tensor-fusion.ai CRDs to be Established")


@dataclass
class Controller:
    """The informers, the allocator state and the reconcilers of a leader."""

    state: AllocatorState
    informers: dict[str, Informer]
    clusters: ClusterReconciler
    gpu_nodes: GPUNodeReconciler
    pools: PoolStatusReconciler
    pods: PodReleaser
    gpu_status: GPUStatusWriter
    taint: ProgressiveTaintReconciler


@contextlib.asynccontextmanager
async def running_controller(client: AsyncClient, namespace: str) -> AsyncIterator[Controller]:
    def custom(kind: str) -> Informer:
        return Informer(LightkubeSource(client, resource_of(kind)), name=kind)

    informers = {
        "GPU": custom("GPU"),
        "GPUNode": custom("GPUNode"),
        "GPUPool": custom("GPUPool"),
        "SchedulingConfigTemplate": custom("SchedulingConfigTemplate"),
        "GPUResourceQuota": custom("GPUResourceQuota"),
        "TensorFusionCluster": custom("TensorFusionCluster"),
        "Node": Informer(LightkubeSource(client, Node), name="Node"),
        "Pod": Informer(
            LightkubeSource(client, Pod, namespace=namespace, labels={KEYS.component: "worker"}),
            name="worker-pods",
        ),
    }
    state = AllocatorState(
        StateCaches(
            gpus=informers["GPU"], gpu_nodes=informers["GPUNode"], nodes=informers["Node"],
            pools=informers["GPUPool"], templates=informers["SchedulingConfigTemplate"],
            quotas=informers["GPUResourceQuota"], pods=informers["Pod"],
        ),
        IsolationPolicy.STATIC,
        time.time,
    )  # fmt: skip
    objects = LightkubeObjects(client)
    recorder = EventRecorder(client, "tensor-fusion-operator")

    def fence() -> float:
        return 30.0

    common: dict[str, Any] = {"client": objects, "fence": fence, "recorder": recorder}
    controller = Controller(
        state=state,
        informers=informers,
        clusters=ClusterReconciler(clusters=informers["TensorFusionCluster"],
                                   pools=informers["GPUPool"], clock=time.time, **common),
        gpu_nodes=GPUNodeReconciler(
            nodes=informers["Node"], gpu_nodes=informers["GPUNode"], gpus=informers["GPU"],
            pools=informers["GPUPool"], hypervisor_pods=None, state=state, clock=time.time,
            agent_readiness="heartbeat", **common,
        ),
        pools=PoolStatusReconciler(pools=informers["GPUPool"], gpu_nodes=informers["GPUNode"],
                                   state=state, clock=time.time, **common),
        pods=PodReleaser(pods=informers["Pod"], state=state, clock=time.time, **common),
        gpu_status=GPUStatusWriter(gpus=informers["GPU"], state=state, clock=time.time,
                                   **common),
        taint=ProgressiveTaintReconciler(nodes=informers["Node"], state=state, enabled=True,
                                         **common),
    )  # fmt: skip
    # The release Event needs the record: the releaser's handler first, then the state's.
    handlers: dict[str, list[Callable[[Any], None]]] = {
        "GPU": [state.on_gpu, controller.gpu_nodes.on_gpu, controller.gpu_status.on_gpu],
        "GPUNode": [state.on_node, controller.gpu_nodes.on_gpu_node, controller.pools.on_gpu_node],
        "GPUPool": [state.on_pool_or_template, controller.clusters.on_pool,
                    controller.gpu_nodes.on_pool, controller.pools.on_pool],
        "SchedulingConfigTemplate": [state.on_pool_or_template],
        "GPUResourceQuota": [state.on_quota],
        "TensorFusionCluster": [controller.clusters.on_cluster],
        "Node": [state.on_node, controller.gpu_nodes.on_node, controller.taint.on_node],
        "Pod": [controller.pods.on_pod, state.on_pod],
    }  # fmt: skip
    for kind, kind_handlers in handlers.items():
        for handler in kind_handlers:
            informers[kind].add_handler(handler)
    async with Supervisor() as supervisor:
        for name, informer in informers.items():
            supervisor.start(f"informer {name}", informer.run)
        for informer in informers.values():
            await asyncio.wait_for(informer.wait_synced(), 60)
        state.recover()
        supervisor.start("clusters", controller.clusters.run)
        supervisor.start("gpu-nodes", controller.gpu_nodes.run)
        supervisor.start("pools", controller.pools.run)
        supervisor.start("pods", controller.pods.run)
        supervisor.start("gpu-status", controller.gpu_status.run)
        supervisor.start("taint", controller.taint.run)
        yield controller
        for name, stats in supervisor.stats.items():
            assert stats.failures == 0, f"{name} failed: {stats.last_error}"


async def read(
    kube: AsyncClient, resource: Any, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The object as a dict, None when it does not exist."""
    try:
        found = await kube.get(resource, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    result: dict[str, Any] = found.to_dict()
    return result


async def must_read(kube: AsyncClient, resource: Any, name: str) -> dict[str, Any]:
    found = await read(kube, resource, name)
    assert found is not None, f"{name} does not exist"
    return found


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def taints(node: Mapping[str, Any]) -> list[Any]:
    return list((node.get("spec") or {}).get("taints") or [])


async def play_node_agent(kube: AsyncClient, node: str, pool: str, gpus: list[str]) -> None:
    """What a node agent writes: its GPU objects (owned by the GPUNode), then a heartbeat."""
    gpu_node = await must_read(kube, GPU_NODE, node)
    owner = {"apiVersion": V1, "kind": "GPUNode", "name": node,
             "uid": gpu_node["metadata"]["uid"], "controller": True}  # fmt: skip
    for name in gpus:
        await kube.create(GPU({
            "apiVersion": V1, "kind": "GPU",
            "metadata": {"name": name, "ownerReferences": [owner],
                         "labels": {KEYS.managed_by: node, KEYS.gpupool: pool}},
        }))  # fmt: skip
        await kube.patch(GPU.Status, name, {"status": {
            "phase": "Pending", "capacity": {"tflops": "312", "vram": "80Gi"},
            "available": {"tflops": "312", "vram": "80Gi"}, "uuid": name, "index": 0,
            "gpuModel": "A100", "nodeSelector": {"kubernetes.io/hostname": node},
            "usedBy": "tensor-fusion", "isolationMode": "soft",
        }}, patch_type=PatchType.MERGE)  # fmt: skip
    await heartbeat(kube, node, len(gpus))


async def heartbeat(kube: AsyncClient, node: str, gpus: int) -> None:
    await kube.patch(GPU_NODE.Status, node, {"status": {
        "totalGPUs": gpus, "managedGPUs": gpus,
        "hypervisorStatus": {"hypervisorState": "Running", "hypervisorVersion": "test",
                             "lastHeartbeatTime": format_rfc3339(time.time())},
    }}, patch_type=PatchType.MERGE)  # fmt: skip


def worker_pod(
    name: str, namespace: str, pool: str, node: str, gpu: str, *, index_of: int = 1
) -> Any:
    index, value = encode_index(index_of)
    return POD.from_dict({
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {KEYS.component: "worker", KEYS.enabled: "true"},
            "annotations": {KEYS.gpupool: pool, KEYS.gpu_ids: gpu,
                            KEYS.tflops_request: "100", KEYS.vram_request: "10Gi"},
            "finalizers": [KEYS.finalizer],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"limits": {index: str(value)}}}],
        },
    })  # fmt: skip


async def test_pools_nodes_gpus_and_the_cluster_run_and_follow_a_worker(
    kube: AsyncClient,
    namespace: str,
    control_plane: ControlPlane,
    fake_gpu_nodes: FakeGpuNodes,
) -> None:
    await apply_crds(control_plane, kube)
    run = secrets.token_hex(3)
    cluster_name, pool_name = f"tf-{run}", f"tf-{run}-shared"
    nodes = [n.metadata.name for n in await fake_gpu_nodes(2, gpus=2, labels={"tf-run": run})
             if n.metadata and n.metadata.name]  # fmt: skip
    template = {
        "nodeManagerConfig": {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "tf-run", "operator": "In", "values": [run]}]}]}},
        "capacityConfig": {"oversubscription": {"tflopsOversellRatio": 200,
                                                "vramExpandToHostMem": 0,
                                                "vramExpandToHostDisk": 0}},
    }  # fmt: skip
    elsewhere = {
        "nodeManagerConfig": {
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "tf-run", "operator": "In", "values": ["nowhere"]}
                        ]
                    }
                ]
            }
        }
    }
    await kube.create(CLUSTER({
        "apiVersion": V1, "kind": "TensorFusionCluster", "metadata": {"name": cluster_name},
        "spec": {"gpuPools": [{"name": "shared", "isDefault": True, "specTemplate": template},
                              {"name": "extra", "specTemplate": elsewhere}]},
    }))  # fmt: skip
    gpus = {node: [f"gpu-{run}-{i}-{g}" for g in range(2)] for i, node in enumerate(nodes)}
    client = make_client(str(control_plane.kubeconfig))
    beating = False
    try:
        async with running_controller(client, namespace) as controller:
            # -- pools and GPUNodes appear --------------------------------------------------
            async def gpu_nodes_created() -> bool:
                found = [await read(kube, GPU_NODE, n) for n in nodes]
                pools = [(g or {}).get("metadata", {}).get("labels", {}) for g in found]
                return all(labels.get(KEYS.managed_by) == pool_name for labels in pools)

            await eventually(gpu_nodes_created, what="a GPUNode per matching node")
            pool = await must_read(kube, POOL, pool_name)
            assert pool["metadata"]["annotations"][KEYS.is_default_pool] == "true"
            assert pool["metadata"]["ownerReferences"][0]["name"] == cluster_name
            assert await read(kube, POOL, f"tf-{run}-extra") is not None

            # -- node agents register GPUs and beat: everything runs ------------------------
            for node, names in gpus.items():
                await play_node_agent(kube, node, pool_name, names)
            beating = True

            async def keep_beating() -> None:
                while beating:
                    await asyncio.sleep(20)
                    for node, names in gpus.items():
                        await heartbeat(kube, node, len(names))

            beats = asyncio.create_task(keep_beating())

            async def all_running() -> Any:
                node_status = [status(await read(kube, GPU_NODE, n)) for n in nodes]
                gpu_phases = [status(await read(kube, GPU, g)).get("phase")
                              for names in gpus.values() for g in names]  # fmt: skip
                pool_status = status(await read(kube, POOL, pool_name))
                ok = (all(s.get("phase") == "Running" and s.get("totalTFlops") == "624"
                          for s in node_status)
                      and gpu_phases == ["Running"] * 4
                      and pool_status.get("phase") == "Running"
                      and pool_status.get("totalTFlops") == "1248")  # fmt: skip
                return pool_status if ok else None

            pool_status = await eventually(all_running, what="GPUNodes, GPUs and pool Running")
            assert pool_status["virtualTFlops"] == "2496" and pool_status["totalVRAM"] == "320Gi"
            assert (pool_status["readyNodes"], pool_status["totalGPUs"]) == (2, 4)

            async def only_extra_waits() -> Any:
                cluster = status(await read(kube, CLUSTER, cluster_name))
                return cluster if cluster.get("readyGPUPools") == [pool_name] else None

            cluster = await eventually(only_extra_waits, what="the cluster to see its pool run")
            assert cluster["phase"] == "Pending"  # the `extra` pool has no node
            assert cluster["notReadyGPUPools"] == [f"tf-{run}-extra"]

            # -- a removed entry deletes its pool; the cluster runs -------------------------
            current = await must_read(kube, CLUSTER, cluster_name)
            entries = [e for e in current["spec"]["gpuPools"] if e["name"] == "shared"]
            await kube.patch(CLUSTER, cluster_name, {"spec": {"gpuPools": entries}},
                             patch_type=PatchType.MERGE)  # fmt: skip

            async def cluster_running() -> Any:
                gone = await read(kube, POOL, f"tf-{run}-extra") is None
                cluster_status = status(await read(kube, CLUSTER, cluster_name))
                return cluster_status if gone and cluster_status.get("phase") == "Running" else None

            cluster = await eventually(cluster_running, what="extra pool deleted, cluster Running")
            assert (cluster["totalPools"], cluster["totalNodes"], cluster["totalGPUs"]) == (1, 2, 4)
            assert cluster["totalTFlops"] == "1248"

            # -- a worker pod with gpu-ids changes the figures ------------------------------
            busy_node, busy_gpu = nodes[0], gpus[nodes[0]][0]
            await kube.create(worker_pod("w1", namespace, pool_name, busy_node, busy_gpu))

            async def figures_follow() -> bool:
                node_status = status(await read(kube, GPU_NODE, busy_node))
                gpu_status = status(await read(kube, GPU, busy_gpu))
                pool_now = status(await read(kube, POOL, pool_name))
                node_obj = await must_read(kube, NODE, busy_node)
                return (node_status.get("availableTFlops") == "524"
                        and node_status.get("totalGPUPods") == 1
                        and gpu_status.get("available") == {"tflops": "212", "vram": "70Gi"}
                        and len(gpu_status.get("runningApps") or []) == 1
                        and pool_now.get("availableTFlops") == "1148"
                        and TAINT in taints(node_obj))  # fmt: skip

            await eventually(figures_follow, what="figures, GPU status and taint after the pod")
            stamped = await must_read(kube, GPU_NODE, busy_node)
            assert KEYS.last_sync in (stamped["metadata"].get("annotations") or {})

            # -- deleting it releases it and removes the finalizer --------------------------
            await kube.delete(POD, "w1", namespace=namespace, grace_period=0)

            async def released() -> bool:
                gone = await read(kube, POD, "w1", namespace) is None
                node_status = status(await read(kube, GPU_NODE, busy_node))
                gpu_status = status(await read(kube, GPU, busy_gpu))
                node_obj = await must_read(kube, NODE, busy_node)
                return (gone and node_status.get("availableTFlops") == "624"
                        and node_status.get("totalGPUPods") == 0
                        and gpu_status.get("available") == {"tflops": "312", "vram": "80Gi"}
                        and not gpu_status.get("runningApps")
                        and TAINT not in taints(node_obj))  # fmt: skip

            await eventually(released, what="the pod released, its finalizer gone, figures back")
            assert controller.state.allocator is not None
            assert controller.state.allocator.records == {}

            async def release_event() -> bool:
                events = [e async for e in kube.list(Event, namespace=namespace)]
                return any(e.reason == "GPUResourcesReleased" for e in events)

            await eventually(release_event, what="the GPUResourcesReleased Event")
            beating = False
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
    finally:
        beating = False
        await client.close()
        for names in gpus.values():
            for name in names:
                with contextlib.suppress(ApiError):
                    await kube.delete(GPU, name)
        for node in nodes:
            with contextlib.suppress(ApiError):
                await kube.delete(GPU_NODE, node)
        with contextlib.suppress(ApiError):
            await kube.delete(CLUSTER, cluster_name)
        for pool_suffix in ("shared", "extra"):
            with contextlib.suppress(ApiError):
                await kube.delete(POOL, f"tf-{run}-{pool_suffix}")
