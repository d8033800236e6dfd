"""The kubelet's part for ordinary pods where there is none (the dev environment).

`WorkloadPods` follows every pod: a pod bound to a node is marked Running and Ready (the pod
never runs: nothing is started for it), a bound pod being deleted has its deletion confirmed
(grace period 0), and the GPU usage of each worker pod (a pod whose `gpu-ids` names GPUs) is
written into its node's simulated GPU file, so that the node's agent reports it in
`tf_worker_usage` and the alert rules have data. A worker uses what it requested: its
`tflops-request` as a share of the card's FP16 TFLOPS (or its `compute-percent-request`), and
its `vram-request`. The agents' own pods are left to `node_agents.AgentRunner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType, on_error_retry

from tensorfusion.devenv.fake_nodes import FakeNode, WorkerGPUUsage, simulation_text
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.domain.quantities import parse_quantity
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = ["WorkloadPods", "worker_loads"]

_log = logging.getLogger(__name__)


def _number(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return float(parse_quantity(text).value)
    except ValueError:
        return 0.0


def worker_loads(pod: Mapping[str, Any], node: FakeNode) -> list[WorkerGPUUsage]:
    """What worker `pod` uses of each GPU its `gpu-ids` names on `node` (GPU object names;
    none for another pod)."""
    annotations: Mapping[str, str] = pod["metadata"].get("annotations") or {}
    names = [n.strip() for n in annotations.get(KEYS.gpu_ids, "").split(",") if n.strip()]
    by_name = {gpu_name(node.gpu_uuid(i)): i for i in range(node.spec.gpus.count)}
    card_tflops = _number(node.hardware.fp16_tflops)
    tflops = _number(annotations.get(KEYS.tflops_request))
    if tflops and card_tflops:
        percent = 100.0 * tflops / card_tflops
    else:
        percent = _number(annotations.get(KEYS.compute_percent_request))
    memory = int(_number(annotations.get(KEYS.vram_request)))
    name = pod["metadata"]["name"]
    return [WorkerGPUUsage(name, by_name[gpu], min(percent, 100.0), memory)
            for gpu in names if gpu in by_name]  # fmt: skip


@dataclass
class WorkloadPods:
    """Marks bound pods Running, confirms their deletion, reports workers' GPU usage."""

    kube: AsyncClient
    nodes: Mapping[str, FakeNode]
    simulation_file: Callable[[str], Path]
    """Where the simulated GPU file of a node is."""
    node_ip: Callable[[str], str]
    """The address a node's pods report (host and pod IP)."""
    on_change: Callable[[str], Awaitable[None]] | None = None
    """Told the node whose simulated GPU file changed (its agent re-reads it)."""
    loads: dict[str, dict[str, list[WorkerGPUUsage]]] = field(default_factory=dict)
    """Per node, per worker pod, its usage."""

    def write_simulation(self, node: str) -> None:
        """Write the node's simulated GPU file with its workers' usage."""
        workers = [load for pod in self.loads.get(node, {}).values() for load in pod]
        path = self.simulation_file(node)
        text = simulation_text(self.nodes[node], workers)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text)
        temporary.replace(path)

    async def _changed(self, node: str) -> None:
        self.write_simulation(node)
        if self.on_change is not None:
            await self.on_change(node)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[WorkloadPods]:
        """Follow the pods until the block ends."""
        for node in self.nodes:
            self.write_simulation(node)
        watch = asyncio.create_task(self._watch(), name="workload-pods")
        try:
            yield self
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _watch(self) -> None:
        async for op, pod in self.kube.watch(Pod, namespace="*", on_error=on_error_retry):
            body: dict[str, Any] = pod.to_dict()  # type: ignore[no-untyped-call]
            try:
                await self.on_pod(op, body)
            except ApiError as error:  # the pod changed meanwhile: the next event retries
                _log.info("pod %s: %s", body["metadata"].get("name"), error.status.message)
            except Exception:  # one pod's failure must not end the watch: logged, retried
                _log.exception("pod %s: handling %s failed", body["metadata"].get("name"), op)

    async def on_pod(self, op: str, pod: Mapping[str, Any]) -> None:
        """One watch event."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName", "")
        if node not in self.nodes or (meta.get("labels") or {}).get(KEYS.component) == (
            "hypervisor"
        ):
            return
        name, namespace = meta["name"], meta["namespace"]
        if op == "DELETED" or meta.get("deletionTimestamp"):
            if self.loads.get(node, {}).pop(f"{namespace}/{name}", None) is not None:
                await self._changed(node)
            if op != "DELETED":
                with contextlib.suppress(ApiError):
                    await self.kube.delete(Pod, name, namespace=namespace, grace_period=0)
            return
        loads = worker_loads(pod, self.nodes[node])
        key = f"{namespace}/{name}"
        if loads != self.loads.get(node, {}).get(key, []):
            self.loads.setdefault(node, {})[key] = loads
            await self._changed(node)
        if (pod.get("status") or {}).get("phase") == "Running":
            return
        now = format_rfc3339(time.time())
        address = self.node_ip(node)
        containers = [
            {"name": c["name"], "image": c.get("image", ""), "ready": True, "restartCount": 0,
             "imageID": "", "started": True, "state": {"running": {"startedAt": now}}}
            for c in spec.get("containers") or ()
        ]  # fmt: skip
        status = {
            "phase": "Running", "startTime": now, "hostIP": address, "podIP": address,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                           for t in ("Initialized", "ContainersReady", "Ready")],
            "containerStatuses": containers,
        }  # fmt: skip
        # A strategic merge keeps the other conditions (PodScheduled, the scheduler's): a pod's
        # conditions merge by type.
        await self.kube.patch(Pod.Status, name, {"status": status}, namespace=namespace,
                              patch_type=PatchType.STRATEGIC)  # fmt: skip
