"""A pool's agent image changed on the real control plane (deployment.md §11), the controller in
heartbeat mode and an agent process per pod: with `autoUpdateHypervisor: false` the status says
out of sync and no pod changes; at `batchPercentage: 0` the rollout is paused; a maintenance
window is reported and ignored without the pool's opt-in annotation, and holds batches back with
it; then 20 % of 10 nodes per batch: 5 batches of the oldest GPUNodes, each complete when its
new agents beat, the next `batchInterval` after."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, ServiceAccount
from lightkube.types import PatchType

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pods import hypervisor_pod_name
from tensorfusion.domain.desired_state.rollout import BATCH_POLL_S
from tensorfusion.domain.timestamps import parse_rfc3339

from .agent_runner import AgentRunner
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane, eventually
from .nodes import FakeGpuNodes
from .test_controller_reconcilers import GPU, GPU_NODE, POD, POOL, read, status
from .test_node_agent import pool_of_nodes

pytestmark = pytest.mark.cluster

NODES = 10
INTERVAL_S = 3


def condition(pool: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    found = (c for c in status(pool).get("conditions") or () if c["type"] == kind)
    return next(found, {})


async def test_a_changed_agent_image_rolls_out_as_the_pool_policy_says(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="tensor-fusion-hypervisor-sa",
                                                         namespace=namespace)))  # fmt: skip
    closed = f"0 {(datetime.now(UTC).hour + 12) % 24} * * *"
    policy = {"autoUpdateHypervisor": False, "batchPercentage": 20,
              "batchInterval": f"{INTERVAL_S}s", "maxDuration": "30m",
              "maintenanceWindow": {"includes": [closed]}}  # fmt: skip
    spec = {"nodeManagerConfig": {"nodePoolRollingUpdatePolicy": policy},
            "componentConfig": {"hypervisor": {"image": "example.com/agent:1"}}}  # fmt: skip
    run, pool, nodes = await pool_of_nodes(control_plane, kube, fake_gpu_nodes, cluster_objects,
                                           count=NODES, spec=spec, suffix="roll")  # fmt: skip
    for name in nodes:
        cluster_objects(GPU, f"gpu-{run}-{name}".lower())
    controller = replicas("replica-r", "-leader-elect", "-agent-readiness", "heartbeat")

    def sim_file(node: str) -> Path:
        path = tmp_path / f"{node}.yaml"
        path.write_text(f"gpus:\n  - model: NVIDIA H100 80GB HBM3\n    vram: 80Gi\n"
                        f"    uuid: GPU-{run}-{node}\n")  # fmt: skip
        return path

    metrics = {"TF_METRICS_WRITE_URL": f"http://{controller.ip}:{controller.api_port}"}
    runner = AgentRunner(control_plane, kube, namespace, tmp_path, sim_file, metrics)
    async with runner.running():

        def logs() -> list[Any]:
            return [controller.component, *runner.components()]

        async def pods() -> dict[str, dict[str, Any]]:
            found = {n: await read(kube, POD, hypervisor_pod_name(n), namespace) for n in nodes}
            return {n: p for n, p in found.items() if p}

        async def pool_obj() -> dict[str, Any]:
            obj = await read(kube, POOL, pool)
            assert obj is not None
            return obj

        async def all_running() -> dict[str, Any] | None:
            phases = [status(await read(kube, GPU_NODE, n)).get("phase") for n in nodes]
            obj = await pool_obj()
            components = status(obj).get("componentStatus") or {}
            synced = components.get("hypervisorConfigSynced") and (
                components.get("hypervisorUpdateProgress") == 100)  # fmt: skip
            return obj if phases == ["Running"] * NODES and synced else None

        first = await eventually(all_running, what="10 agents running, the first hash recorded",
                                 timeout=180, components=logs())  # fmt: skip
        first_hash = status(first)["componentStatus"]["hypervisor"]
        uids = {n: p["metadata"]["uid"] for n, p in (await pods()).items()}

        # -- a window without the opt-in: reported, one Event -----------------------------
        window = condition(first, "MaintenanceWindow")
        assert (window["status"], window["reason"]) == ("False", "NotEnforced")
        assert closed in window["message"]

        async def pool_events(reason: str) -> list[Any]:
            return [e async for e in kube.list(Event, namespace="default")
                    if e.involvedObject.name == pool and e.reason == reason]  # fmt: skip

        [not_enforced] = await pool_events("MaintenanceWindowNotEnforced")
        assert not_enforced.type == "Warning" and not_enforced.count in (None, 1)

        async def set_policy(changes: dict[str, Any], annotations: dict[str, Any]) -> None:
            manager = {"nodePoolRollingUpdatePolicy": changes}
            body = {"metadata": {"annotations": annotations},
                    "spec": {"nodeManagerConfig": manager}}  # fmt: skip
            await kube.patch(POOL, pool, body, patch_type=PatchType.MERGE)

        async def synced_reason(reason: str) -> dict[str, Any] | None:
            obj = await pool_obj()
            return obj if condition(obj, "ConfigSynced").get("reason") == reason else None

        async def unchanged() -> None:
            now = {n: p["metadata"]["uid"] for n, p in (await pods()).items()}
            assert now == uids, "no agent pod was replaced"

        # -- the flag off: recorded, out of sync, no pod changed ---------------------------
        image = {"spec": {"componentConfig": {"hypervisor": {"image": "example.com/agent:2"}}}}
        await kube.patch(POOL, pool, image, patch_type=PatchType.MERGE)
        out = await eventually(lambda: synced_reason("OutOfSync"), what="out of sync",
                               components=logs())  # fmt: skip
        components = status(out)["componentStatus"]
        assert components["hypervisor"] != first_hash
        assert not components["hypervisorConfigSynced"]
        assert components["hypervisorUpdateProgress"] == 0
        await unchanged()

        # -- 0 %: paused -------------------------------------------------------------------
        await set_policy({"autoUpdateHypervisor": True, "batchPercentage": 0}, {})
        paused = await eventually(lambda: synced_reason("RolloutPaused"), what="paused",
                                  components=logs())  # fmt: skip
        assert "paused" in condition(paused, "ConfigSynced")["message"]
        await unchanged()

        # -- the window enforced: batches wait for it --------------------------------------
        await set_policy({"batchPercentage": 20}, {KEYS.honour_maintenance_window: "true"})
        await eventually(lambda: synced_reason("WaitingForWindow"), what="waiting for the window",
                         components=logs())  # fmt: skip
        assert condition(await pool_obj(), "MaintenanceWindow")["reason"] == "WaitingForWindow"
        assert len(await pool_events("RolloutWaitingForMaintenanceWindow")) == 1
        await unchanged()

        # -- the opt-in removed: 5 batches of 2, batchInterval apart -----------------------
        timeline: dict[str, dict[str, float]] = {n: {} for n in nodes}
        stamps: list[float] = []

        async def observe() -> None:
            annotations = (await pool_obj())["metadata"].get("annotations") or {}
            stamp = parse_rfc3339(annotations.get(KEYS.batch_update_last_time("hypervisor")))
            if stamp is not None and stamp not in stamps:
                stamps.append(stamp)
            for node, pod in (await pods()).items():
                if pod["metadata"]["uid"] == uids[node]:
                    continue
                seen = timeline[node]
                created = parse_rfc3339(pod["metadata"]["creationTimestamp"]) or 0.0
                seen.setdefault("created", created)
                beat = (status(await read(kube, GPU_NODE, node)).get("hypervisorStatus")
                        or {}).get("lastHeartbeatTime")  # fmt: skip
                when = parse_rfc3339(beat)
                if when is not None and when >= created:
                    seen.setdefault("beat", when)

        async def follow() -> None:
            while True:
                await observe()
                await asyncio.sleep(0.3)

        follower = asyncio.create_task(follow())
        try:
            # the first batch's new agents start only when the test releases them: until
            # then no other pod may change, however long that takes (watched for batchInterval
            # plus the controller's batch poll and a margin)
            first_batch = nodes[:2]
            runner.held.update(first_batch)
            await set_policy({}, {KEYS.honour_maintenance_window: None})

            async def first_batch_replaced() -> bool:
                current = await pods()
                return all(current.get(n, {}).get("metadata", {}).get("uid") not in (None, uids[n])
                           for n in first_batch)  # fmt: skip

            await eventually(first_batch_replaced, what="the first batch's pods replaced",
                             components=[controller.component])  # fmt: skip
            deadline = asyncio.get_running_loop().time() + INTERVAL_S + BATCH_POLL_S + 2
            while asyncio.get_running_loop().time() < deadline:
                current = await pods()
                changed = [n for n in nodes[2:] if current.get(n, {}).get("metadata", {})
                           .get("uid") != uids[n]]  # fmt: skip
                assert not changed, f"a batch started before the first one's agents beat: {changed}"
                await asyncio.sleep(0.5)
            for node in first_batch:
                await runner.release(node)
            # agents come and go here: only the controller is watched for an early exit
            await eventually(lambda: synced_reason("Synced"), what="the rollout complete",
                             timeout=300, components=[controller.component])  # fmt: skip
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await observe()
        done = status(await pool_obj())["componentStatus"]
        assert done["hypervisorConfigSynced"] and done["hypervisorUpdateProgress"] == 100
        for pod in (await pods()).values():
            assert pod["spec"]["containers"][0]["image"] == "example.com/agent:2"
        order = sorted(nodes, key=lambda n: (timeline[n]["created"], nodes.index(n)))
        batches = [order[i : i + 2] for i in range(0, NODES, 2)]
        assert [sorted(b, key=nodes.index) for b in batches] == [
            nodes[i:i + 2] for i in range(0, NODES, 2)], "the oldest GPUNodes first"  # fmt: skip
        assert len(stamps) >= 5, f"a stamp per completed batch: {stamps}"
        for before, after in itertools.pairwise(batches):
            ready_at = max(timeline[n]["beat"] for n in before)
            started = min(timeline[n]["created"] for n in after)
            # times in whole seconds: a batch starts no sooner than its predecessor's new
            # agents beat plus batchInterval
            assert started >= ready_at + INTERVAL_S - 1, (before, after, timeline)
