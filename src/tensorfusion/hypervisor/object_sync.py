"""The node agent's writes (deployment.md §9.2, §9.3): the GPU objects of what it discovered,
the GPUs that vanished, and the GPUNode status with its heartbeat.

Every write is retried 3 times (200 ms doubling) and then raised: the agent's loops log it,
report it in `/readyz` and try again on the next round. The objects themselves come from the
pure `domain.devices.gpu_objects`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import quote

import orjson

from tensorfusion.adapters.kube.client import KubeClient, raw_http
from tensorfusion.adapters.kube.events import EventSink, InvolvedObject
from tensorfusion.adapters.kube.object_client import KubeError, ObjectClient
from tensorfusion.domain.devices.gpu_objects import (
    AgentIdentity,
    gpu_metadata,
    gpu_name,
    gpu_node_status_patch,
    gpu_status_patch,
    vanished_patch,
)
from tensorfusion.domain.devices.inventory import DeviceInfo, Inventory
from tensorfusion.domain.object_views import name_of, uid_of
from tensorfusion.domain.timestamps import format_rfc3339

__all__ = [
    "ATTEMPTS",
    "GPUNodeMissingError",
    "GPUObjectSync",
    "ManagedGPUs",
    "ModelFacts",
    "managed_gpus_of",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")
ATTEMPTS: Final = 3
BACKOFF_S: Final = 0.2
UNKNOWN_MODEL: Final = "UnknownGPUModel"
_GPUS: Final = "/apis/tensor-fusion.ai/v1/gpus"


class GPUNodeMissingError(RuntimeError):
    """The node's GPUNode does not exist (yet): the controller creates it for pool nodes."""


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the agent knows of a device's model: FP16 TFLOPS in thousandths, the short model
    name for `gpuModel`, and why the TFLOPS are 0 when the model is unknown."""

    tflops_milli: int
    gpu_model: str
    unknown: str | None = None


ModelLookup = Callable[[DeviceInfo], ModelFacts]
ManagedGPUs = Callable[[str], Awaitable[dict[str, dict[str, Any]]]]
"""The GPU objects labelled `managed-by=<node>`, by name."""


def managed_gpus_of(client: KubeClient) -> ManagedGPUs:
    """`ManagedGPUs` through the API server (one list by label)."""

    async def managed(node: str) -> dict[str, dict[str, Any]]:
        selector = quote(f"tensor-fusion.ai/managed-by={node}")
        response = await raw_http(client).get(f"{_GPUS}?labelSelector={selector}")
        if response.status_code >= 300:
            raise KubeError(response.status_code, response.text)
        items = orjson.loads(response.content).get("items") or []
        return {name_of(item): item for item in items}

    return managed


async def _retried(what: str, call: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(ATTEMPTS):
        try:
            return await call()
        except KubeError as error:
            if attempt == ATTEMPTS - 1 or error.code == 404:
                raise
            _log.warning("%s failed (attempt %d of %d): %s", what, attempt + 1, ATTEMPTS, error)
            await asyncio.sleep(BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")


class GPUObjectSync:
    """GPU and GPUNode objects of one node, kept as the agent discovers them."""

    def __init__(
        self,
        *,
        objects: ObjectClient,
        managed_gpus: ManagedGPUs,
        events: EventSink,
        node: str,
        pool: str,
        isolation_policy: str | None,
        isolation_mode: str,
        models: ModelLookup,
        version: str,
        clock: Callable[[], float],
        mps_status: Callable[[], Mapping[str, Any] | None] = lambda: None,
    ) -> None:
        self._objects = objects
        self._managed_gpus = managed_gpus
        self._events = events
        self._node = node
        self._pool = pool
        self._policy = isolation_policy
        self._mode = isolation_mode
        self._models = models
        self._version = version
        self._clock = clock
        self._mps_status = mps_status
        self._warned: set[str] = set()
        self._node_phase: str | None = None
        self.tflops_milli: dict[str, int] = {}

    async def identity(self) -> AgentIdentity:
        """Who writes, with the GPUNode's UID; GPUNodeMissingError until it exists."""
        gpu_node = await self._objects.get("GPUNode", self._node)
        if gpu_node is None:
            raise GPUNodeMissingError(
                f"GPUNode {self._node} does not exist yet (the controller creates it for the "
                "nodes its pools select)"
            )
        uid = uid_of(gpu_node)
        self._node_phase = (gpu_node.get("status") or {}).get("phase")
        return AgentIdentity(node=self._node, pool=self._pool, gpu_node_uid=uid,
                             isolation_policy=self._policy, isolation_mode=self._mode)  # fmt: skip

    async def sync(self, inventory: Inventory, *, state: str) -> None:
        """Write the GPU objects of `inventory`, handle vanished GPUs, then the GPUNode status."""
        identity = await self.identity()
        now = format_rfc3339(self._clock())
        existing = await self._managed_gpus(self._node)
        devices = inventory.devices
        self.tflops_milli = {}
        for device in devices:
            facts = self._models(device)
            name = gpu_name(device.uuid)
            self.tflops_milli[name] = facts.tflops_milli
            current = existing.get(name)
            await self._write_gpu(identity, device, inventory, facts, current, now)
        discovered = {gpu_name(d.uuid) for d in devices}
        for name, gpu in existing.items():
            if name not in discovered:
                await self._vanished(name, gpu, now)
        await self.heartbeat(inventory, state=state)

    async def heartbeat(self, inventory: Inventory, *, state: str) -> None:
        """The GPUNode status: totals, managed GPUs, node facts and the heartbeat (one PATCH: the
        phase was read by the last sync)."""
        status = gpu_node_status_patch(inventory, self.tflops_milli, version=self._version,
                                       state=state, now_rfc3339=format_rfc3339(self._clock()),
                                       current_phase=self._node_phase,
                                       mps=self._mps_status())  # fmt: skip
        try:
            await _retried(f"GPUNode {self._node} status", lambda: self._objects.patch(
                "GPUNode", self._node, {"status": status}, status=True))  # fmt: skip
        except KubeError as error:
            if error.code == 404:
                raise GPUNodeMissingError(f"GPUNode {self._node} does not exist") from None
            raise
        self._node_phase = self._node_phase or status.get("phase")

    async def _write_gpu(
        self,
        identity: AgentIdentity,
        device: DeviceInfo,
        inventory: Inventory,
        facts: ModelFacts,
        current: Mapping[str, Any] | None,
        now: str,
    ) -> None:
        name = gpu_name(device.uuid)
        metadata = gpu_metadata(identity, device, now)
        if current is None:
            body = {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU", "metadata": metadata}
            try:
                current = await _retried(f"GPU {name} create",
                                         lambda: self._objects.create("GPU", body))  # fmt: skip
            except KubeError as error:
                if error.code != 409:
                    raise
                current = await self._objects.get("GPU", name)
        else:
            patch = {
                "metadata": {
                    key: metadata[key] for key in ("labels", "annotations", "ownerReferences")
                }
            }
            await _retried(f"GPU {name} metadata",
                           lambda: self._objects.patch("GPU", name, patch))  # fmt: skip
        status = gpu_status_patch(identity, device, inventory.devices,
                                  tflops_milli=facts.tflops_milli, gpu_model=facts.gpu_model,
                                  current=(current or {}).get("status"))  # fmt: skip
        await _retried(f"GPU {name} status", lambda: self._objects.patch(
            "GPU", name, {"status": status}, status=True))  # fmt: skip
        if facts.unknown and name not in self._warned:
            self._warned.add(name)
            uid = uid_of(current)
            _log.warning("GPU %s: %s", name, facts.unknown)
            await self._events.record(
                InvolvedObject("GPU", name, "", uid, "tensor-fusion.ai/v1"), "Warning",
                UNKNOWN_MODEL, facts.unknown,
            )  # fmt: skip

    async def _vanished(self, name: str, gpu: Mapping[str, Any], now: str) -> None:
        patch = vanished_patch(gpu, now)
        if patch is None:
            _log.info("GPU %s is no longer discovered and idle: deleted", name)
            await _retried(f"GPU {name} delete", lambda: self._objects.delete("GPU", name))
            return
        _log.warning("GPU %s is no longer discovered but allocated: marked Unknown", name)
        await _retried(f"GPU {name} metadata", lambda: self._objects.patch(
            "GPU", name, {"metadata": patch["metadata"]}))  # fmt: skip
        await _retried(f"GPU {name} status", lambda: self._objects.patch(
            "GPU", name, {"status": patch["status"]}, status=True))  # fmt: skip
