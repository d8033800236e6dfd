"""`tensor-fusion controller` replicas against the real API server: start-up errors, one
leader, recovery, takeover after `kill -9`, and a replica that loses the Lease exits non-zero."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import aiohttp
import pytest
from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from tensorfusion.domain.annotations import KEYS
from tensorfusion.runtime.leader_election import LEASE_NAME

from .conftest import DeleteLater
from .controller_replicas import EXECUTABLE, Replica, Start, holder, install_crds
from .controlplane import Component, ControlPlane, eventually
from .nodes import FakeGpuNodes
from .sealed_workers import create_sealed_worker
from .test_controller_reconcilers import (
    CLUSTER,
    GPU,
    GPU_NODE,
    POD,
    POOL,
    V1,
    apply_crds,
    heartbeat,
    play_node_agent,
    read,
    status,
    worker_pod,
)

pytestmark = pytest.mark.cluster


async def test_an_unknown_flag_exits_2_with_one_line(control_plane: ControlPlane) -> None:
    component = Component(
        "bad-flag", [EXECUTABLE, "controller", "-leader-elekt"], control_plane.workdir / "bad.log"
    )
    component.start()

    async def exited() -> int | None:
        return component.exit_code

    assert await eventually(exited, what="the controller to exit") == 2
    log = component.log_path.read_text()
    assert "unknown flag -leader-elekt; valid flags: -agent-readiness" in log
    assert "Traceback" not in log


async def test_one_leader_and_a_takeover_after_kill_9(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, replicas: Start
) -> None:
    await install_crds(control_plane)
    first = replicas("replica-a", "-leader-elect")

    async def led_by_first() -> bool:
        return await holder(kube, namespace) == "replica-a"

    await eventually(led_by_first, what="replica-a to lead", components=[first.component])
    second = replicas("replica-b", "-leader-elect")

    async def allocation_ready(replica: Replica) -> bool:
        try:
            status, body = await replica.get("/api/allocation")
        except aiohttp.ClientError:
            return False
        return status == 200 and json.loads(body)["ready"] is True

    async def both_answer() -> bool:
        return await allocation_ready(first) and await allocation_ready(second)

    # The follower forwards /api/* to the leader's POD_IP from the leader-info ConfigMap.
    await eventually(both_answer, what="/api/allocation ready on both replicas",
                     components=[first.component, second.component])  # fmt: skip

    async def second_ready() -> bool:
        try:
            return (await second.get("/readyz", health=True))[0] == 200
        except aiohttp.ClientError:
            return False

    await eventually(second_ready, what="replica-b /readyz", components=[second.component])
    first.component.kill()
    probes: list[int] = []

    async def led_by_second() -> bool:
        probes.append((await second.get("/readyz", health=True))[0])
        return await holder(kube, namespace) == "replica-b" and await allocation_ready(second)

    # The Lease lasts 15 s: replica-b takes it at most one retry period (with jitter) later.
    await eventually(led_by_second, what="replica-b to take over within 20 s", timeout=20,
                     components=[second.component])  # fmt: skip
    assert set(probes) == {200}, "the survivor's /readyz never depends on leadership"
    assert second.component.exit_code is None


async def test_a_replica_that_loses_the_lease_exits_1(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, replicas: Start
) -> None:
    await install_crds(control_plane)
    leader = replicas("replica-c", "-leader-elect").component

    async def leads() -> bool:
        return await holder(kube, namespace) == "replica-c"

    await eventually(leads, what="replica-c to lead", components=[leader])
    lease = await kube.get(Lease, LEASE_NAME, namespace=namespace)
    assert lease.spec is not None
    lease.spec.holderIdentity = "someone-else"
    await kube.replace(lease)

    async def exited() -> int | None:
        return leader.exit_code

    assert await eventually(exited, what="replica-c to exit", timeout=30) == 1
    assert "leadership lost" in leader.log_path.read_text()


GUIDE_POD = Path(__file__).resolve().parents[1] / "unit" / "scheduling" / "data"
GUIDE_POD = GUIDE_POD / "guide_test_pod.yaml"


async def test_the_guides_simulate_schedule_curl_works_on_either_replica(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    """The guide's test pod (no pool named: the default one) placed through either replica,
    on a node whose agent registered its GPU and beats."""
    await apply_crds(control_plane, kube)
    run = secrets.token_hex(3)
    pool = f"tf-{run}-default"
    node = next(n.metadata.name for n in await fake_gpu_nodes(1, labels={"tf-run": run})
                if n.metadata and n.metadata.name)  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    await kube.create(POOL({
        "apiVersion": V1, "kind": "GPUPool",
        "metadata": {"name": pool, "annotations": {KEYS.is_default_pool: "true"}},
        "spec": {"nodeManagerConfig": {"nodeSelector": selector}},
    }))  # fmt: skip
    cluster_objects(POOL, pool)
    cluster_objects(GPU_NODE, node)
    gpu = f"gpu-{run}-0"
    cluster_objects(GPU, gpu)
    leader = replicas("replica-d", "-leader-elect", "-agent-readiness", "heartbeat")

    async def gpu_node() -> bool:
        return await read(kube, GPU_NODE, node) is not None

    await eventually(gpu_node, what="the GPUNode", components=[leader.component])
    await play_node_agent(kube, node, pool, [gpu])
    beating = asyncio.create_task(keep_beating(kube, node, 1))
    try:
        follower = replicas("replica-e", "-leader-elect", "-agent-readiness", "heartbeat")
        body = GUIDE_POD.read_text()
        answers: list[object] = []

        async def placed(replica: Replica) -> dict[str, object] | None:
            url = replica.url("/api/simulate-schedule")
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.post(
                        url, data=body, headers={"Content-Type": "application/yaml"}
                    ) as reply,
                ):
                    if reply.status != 200:
                        return None
                    answer: dict[str, object] = await reply.json()
            except aiohttp.ClientError:
                return None
            result = answer["result"]
            assert isinstance(result, dict)
            answers.append(result)
            return result if result["schedulable"] else None

        for replica in (leader, follower):

            async def on_this_replica(target: Replica = replica) -> dict[str, object] | None:
                return await placed(target)

            try:
                result = await eventually(
                    on_this_replica,
                    what=f"the pod placed through {replica.component.name}",
                    components=[leader.component, follower.component],
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\nlast answer: {answers[-1:]}") from None
            assert result["node"] == node and result["gpus"] == [gpu]
        # Through the follower: an impossible request names the stage per node, a bad
        # annotation is 422, and the state-changing endpoint wants a token.
        huge = body.replace('tflops-request: "100"', 'tflops-request: "5000"').replace(
            'tflops-limit: "100"', 'tflops-limit: "5000"')  # fmt: skip
        code, answer = await post_pod(follower, huge)
        assert code == 200 and answer["result"]["schedulable"] is False, answer
        [rejected] = [n for n in answer["nodes"] if n["node"] == node]
        assert rejected["rejectedAt"] == "GPUResourceFilter", rejected
        assert "available tflops 312 < request 5k" in rejected["gpus"][0]["reason"]
        bad = body.replace('vram-request: "16Gi"', 'vram-request: "lots"')
        code, answer = await post_pod(follower, bad)
        assert code == 422 and answer["error"]["code"] == "InvalidAnnotations"
        assert "vram-request" in answer["error"]["message"]
        code, text = await follower.get("/api/assign-index?podName=p")
        assert code == 401 and "Bearer" in text
    finally:
        beating.cancel()


async def post_pod(replica: Replica, body: str) -> tuple[int, dict[str, Any]]:
    """`POST /api/simulate-schedule` with a YAML pod: the status and the JSON answer."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            replica.url("/api/simulate-schedule"),
            data=body,
            headers={"Content-Type": "application/yaml"},
        ) as reply,  # fmt: skip
    ):
        answer: dict[str, Any] = await reply.json()
        return reply.status, answer


async def test_a_new_leader_rebuilds_exactly_the_allocation_and_releases_a_deleted_worker(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    """The controller as a process: reconcilers bring the pool and its node to Running, a
    worker's gpu-ids show in /api/allocation, a replacement leader rebuilds the same state with
    the stored GPU `available` corrupted, and a deleted worker is released and let go."""
    await apply_crds(control_plane, kube)
    run = secrets.token_hex(3)
    pool = f"tf-{run}-shared"
    node = next(n.metadata.name for n in await fake_gpu_nodes(1, labels={"tf-run": run})
                if n.metadata and n.metadata.name)  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    await kube.create(CLUSTER({
        "apiVersion": V1, "kind": "TensorFusionCluster", "metadata": {"name": f"tf-{run}"},
        "spec": {"gpuPools": [{"name": "shared", "isDefault": True,
                               "specTemplate": {"nodeManagerConfig": {"nodeSelector": selector}}}]},
    }))  # fmt: skip
    cluster_objects(CLUSTER, f"tf-{run}")
    cluster_objects(POOL, pool)
    cluster_objects(GPU_NODE, node)
    flags = ("-leader-elect", "-agent-readiness", "heartbeat")
    first = replicas("replica-f", *flags)

    async def gpu_node() -> bool:
        return await read(kube, GPU_NODE, node) is not None

    await eventually(gpu_node, what="the GPUNode", components=[first.component])
    gpus = [f"gpu-{run}-0", f"gpu-{run}-1"]
    for gpu in gpus:
        cluster_objects(GPU, gpu)
    await play_node_agent(kube, node, pool, gpus)
    beating = asyncio.create_task(keep_beating(kube, node, len(gpus)))
    try:

        async def pool_running() -> bool:
            return status(await read(kube, POOL, pool)).get("phase") == "Running"

        await eventually(pool_running, what="the pool Running", components=[first.component])

        async def kubectl_shows_running() -> str | None:
            shown = await control_plane.kubectl(
                "get", f"tensorfusioncluster/tf-{run}", f"gpupool/{pool}", f"gpunode/{node}",
                f"gpu/{gpus[0]}", f"gpu/{gpus[1]}",
            )  # fmt: skip
            rows = [line for line in shown.splitlines() if line and not line.startswith("NAME")]
            return shown if len(rows) == 5 and all("Running" in r for r in rows) else None

        shown = await eventually(kubectl_shows_running, what="kubectl get: all Running",
                                 components=[first.component])  # fmt: skip
        assert "TOTAL TFLOPS" in shown and "AVAILABLE VRAM" in shown
        await create_sealed_worker(kube, worker_pod("w0", namespace, pool, node, gpus[0]))

        async def allocation(replica: Replica) -> dict[str, Any] | None:
            try:
                code, text = await replica.get(f"/api/allocation?namespace={namespace}")
            except aiohttp.ClientError:
                return None
            body: dict[str, Any] = json.loads(text) if code == 200 else {}
            return body if body.get("ready") and body.get("allocations") else None

        before = await eventually(lambda: allocation(first), what="the worker's allocation",
                                  components=[first.component])  # fmt: skip
        # A bound worker whose gpu-ids no scheduler wrote (no seal) is refused, not adopted.
        await kube.create(worker_pod("forged", namespace, pool, node, gpus[1]))

        async def unsealed_event() -> bool:
            events = [e async for e in kube.list(Event, namespace=namespace)]
            return any(e.reason == "UnsealedAllocation" and e.involvedObject.name == "forged"
                       for e in events)  # fmt: skip

        await eventually(unsealed_event, what="the UnsealedAllocation Event",
                         components=[first.component])  # fmt: skip
        assert not status(await read(kube, GPU, gpus[1])).get("runningApps")
        assert await allocation(first) == before | {"generatedAt": ANY}
        corrupted = {"status": {"available": {"tflops": "1", "vram": "1"}}}
        await kube.patch(GPU.Status, gpus[0], corrupted, patch_type=PatchType.MERGE)
        first.component.kill()
        second = replicas("replica-g", *flags)
        after = await eventually(lambda: allocation(second), what="the rebuilt allocation",
                                 timeout=30, components=[second.component])  # fmt: skip
        for body in (before, after):
            del body["generatedAt"]
        assert after == before
        await kube.delete(POD, "w0", namespace=namespace, grace_period=0)

        async def let_go() -> bool:
            pod_gone = await read(kube, POD, "w0", namespace) is None
            code, text = await second.get(f"/api/allocation?namespace={namespace}")
            return pod_gone and code == 200 and json.loads(text)["allocations"] == []

        await eventually(let_go, what="the worker released and its finalizer removed",
                         components=[second.component])  # fmt: skip
    finally:
        beating.cancel()


async def keep_beating(kube: AsyncClient, node: str, gpus: int) -> None:
    """A node agent's heartbeat every 5 s."""
    while True:
        await heartbeat(kube, node, gpus)
        await asyncio.sleep(5)


async def test_a_kube_scheduler_newer_than_the_api_server_stops_the_start(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    stub = tmp_path / "kube-scheduler"
    stub.write_text("#!/bin/sh\necho 'Kubernetes v1.99.0'\n")
    stub.chmod(0o755)
    await install_crds(control_plane)
    component = Component(
        "newer-scheduler",
        [EXECUTABLE, "controller", "--kubeconfig", str(control_plane.kubeconfig),
         "-health-probe-bind-address", "127.0.0.1:0", "-kube-scheduler-path", str(stub)],
        tmp_path / "newer.log",
    )  # fmt: skip
    component.start()

    async def exited() -> int | None:
        return component.exit_code

    assert await eventually(exited, what="the controller to exit") == 2
    log = component.log_path.read_text()
    assert "kube-scheduler Kubernetes v1.99.0 is newer than the API server v1.37" in log
    assert "Traceback" not in log
