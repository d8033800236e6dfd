"""An in-memory API server for the reconcilers' unit tests, its caches, and object builders.

`FakeApi` keeps objects by (kind, namespace, name) with a resourceVersion that grows on every
change, applies JSON merge patches as the API server does (a `metadata.resourceVersion` in the
body is a precondition: 409 when it is not the current one; a status patch changes only
`status`, a main patch never does), and can be told to fail calls. `api.cache(kind)` is an
informer cache that always shows the API's current objects; `Snapshot` is one frozen in time.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tensorfusion.adapters.kube.events import InvolvedObject
from tensorfusion.adapters.kube.object_client import KubeError
from tensorfusion.controller.allocator_state import AllocatorState, StateCaches
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.timestamps import format_rfc3339
from tensorfusion.domain.vocabulary import IsolationPolicy
from tensorfusion.runtime.informer_store import EventKind, InformerEvent, ObjectKey
from tensorfusion.runtime.leader_election import NotLeaderError

V1 = "tensor-fusion.ai/v1"
rfc3339 = format_rfc3339
NOW = 1_800_000_000.0
"""The tests' wall clock: 2027-01-15T08:00:00Z."""


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


@dataclass
class Call:
    op: str
    kind: str
    name: str
    namespace: str = ""
    body: Any = None
    status: bool = False


@dataclass
class FakeApi:
    """Objects by (kind, namespace, name); every call recorded in `calls`."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    failures: dict[tuple[str, str, str], list[KubeError]] = field(default_factory=dict)
    """(op, kind, name) → errors raised by the next calls, one each."""
    before_write: Any = None
    """Called with the Call before a write is applied (to race another writer)."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # ---- test helpers ---------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object as another writer would (a new resourceVersion; a UID if none)."""
        stored = copy.deepcopy(dict(obj))
        metadata = stored.setdefault("metadata", {})
        metadata.setdefault("uid", f"uid-{next(self._uids)}")
        metadata["resourceVersion"] = str(next(self._versions))
        self.objects[self._key(stored)] = stored
        return stored

    def obj(self, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.objects[(kind, namespace, name)]

    def has(self, kind: str, name: str, namespace: str = "") -> bool:
        return (kind, namespace, name) in self.objects

    def writes(self, op: str | None = None, kind: str | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.op != "get" and (op is None or c.op == op) and (kind is None or c.kind == kind)
        ]

    def fail(self, op: str, kind: str, name: str, *errors: KubeError) -> None:
        self.failures.setdefault((op, kind, name), []).extend(errors)

    def cache(self, kind: str) -> LiveCache:
        return LiveCache(self, kind)

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
        metadata = obj["metadata"]
        return (str(obj["kind"]), str(metadata.get("namespace") or ""), str(metadata["name"]))

    def _maybe_fail(self, op: str, kind: str, name: str) -> None:
        errors = self.failures.get((op, kind, name))
        if errors:
            raise errors.pop(0)

    # ---- ObjectClient ---------------------------------------------------------------------

    async def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        self.calls.append(Call("get", kind, name, namespace))
        self._maybe_fail("get", kind, name)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def create(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        metadata = body["metadata"]
        call = Call("create", kind, metadata["name"], metadata.get("namespace", ""), body)
        self.calls.append(call)
        self._maybe_fail("create", kind, call.name)
        if self.before_write is not None:
            self.before_write(call)
        if (kind, call.namespace, call.name) in self.objects:
            raise KubeError(409, f"{kind} {call.name} already exists", "AlreadyExists")
        return copy.deepcopy(self.put({**body, "kind": kind}))

    async def replace(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        metadata = body["metadata"]
        call = Call("replace", kind, metadata["name"], metadata.get("namespace", ""), body)
        self.calls.append(call)
        self._maybe_fail("replace", kind, call.name)
        if self.before_write is not None:
            self.before_write(call)
        current = self.objects.get((kind, call.namespace, call.name))
        if current is None:
            raise KubeError(404, "not found", "NotFound")
        if metadata.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeError(409, "the object has been modified", "Conflict")
        updated = copy.deepcopy(dict(body))
        updated["status"] = copy.deepcopy(current.get("status"))
        updated["metadata"]["uid"] = current["metadata"]["uid"]
        return copy.deepcopy(self.put(updated))

    async def patch(
        self,
        kind: str,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str = "",
        status: bool = False,
    ) -> dict[str, Any]:
        call = Call("patch", kind, name, namespace, copy.deepcopy(dict(body)), status)
        self.calls.append(call)
        self._maybe_fail("patch", kind, name)
        if self.before_write is not None:
            self.before_write(call)
        current = self.objects.get((kind, namespace, name))
        if current is None:
            raise KubeError(404, f"{kind} {name} not found", "NotFound")
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != current["metadata"]["resourceVersion"]:
            raise KubeError(409, "the object has been modified", "Conflict")
        patch = dict(body)
        if status:
            patch = {"status": patch.get("status")} if "status" in patch else {}
        else:
            patch.pop("status", None)
        if isinstance(patch.get("metadata"), Mapping):
            patch["metadata"] = {
                k: v for k, v in patch["metadata"].items() if k != "resourceVersion"
            }
        updated = apply_merge_patch(current, patch)
        return copy.deepcopy(self.put(updated))

    async def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        self.calls.append(Call("delete", kind, name, namespace))
        self._maybe_fail("delete", kind, name)
        return self.objects.pop((kind, namespace, name), None) is not None


@dataclass
class LiveCache:
    """An informer cache that always shows the API's objects of one kind."""

    api: FakeApi
    kind: str

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return [
            obj
            for (kind, ns, _), obj in sorted(self.api.objects.items())
            if kind == self.kind and (namespace is None or ns == namespace)
        ]

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return self.api.objects.get((self.kind, namespace, name))


@dataclass
class Snapshot:
    """A cache frozen at one moment (to play a cache that lags behind the API)."""

    objects: dict[tuple[str, str], Mapping[str, Any]]

    @classmethod
    def of(cls, api: FakeApi, kind: str) -> Snapshot:
        return cls({
            (ns, name): copy.deepcopy(obj)
            for (k, ns, name), obj in api.objects.items()
            if k == kind
        })  # fmt: skip

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return [o for (ns, _), o in self.objects.items() if namespace is None or ns == namespace]

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return self.objects.get((namespace, name))


def event(
    obj: Mapping[str, Any], kind: EventKind = EventKind.ADDED, old: Mapping[str, Any] | None = None
) -> InformerEvent:
    return InformerEvent(kind, ObjectKey.of(obj), obj, old)


@dataclass
class Recorded:
    kind: str
    name: str
    type: str
    reason: str
    message: str


@dataclass
class FakeRecorder:
    events: list[Recorded] = field(default_factory=list)

    async def record(
        self,
        involved: InvolvedObject,
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
    ) -> None:
        self.events.append(Recorded(involved.kind, involved.name, type_, reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


class Fence:
    """A fence that counts its calls and can be closed."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = True

    def __call__(self) -> float:
        self.calls += 1
        if not self.open:
            raise NotLeaderError("not leader")
        return 10.0


# ---- objects -----------------------------------------------------------------------------


def node(name: str, **labels: str) -> dict[str, Any]:
    all_labels = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name}
    all_labels.update({k.replace("__", "/").replace("_", "."): v for k, v in labels.items()})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}}


def pool(name: str, selector: Mapping[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    manager = {"nodeSelector": selector} if selector is not None else {}
    return {
        "apiVersion": V1,
        "kind": "GPUPool",
        "metadata": {"name": name},
        "spec": {"nodeManagerConfig": manager, **spec},
    }


def selector(key: str, *values: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": key, "operator": "In", "values": list(values)}]}]}  # fmt: skip


def gpu(
    name: str,
    node_name: str,
    pool_name: str = "shared",
    *,
    tflops: str = "312",
    vram: str = "80Gi",
    phase: str = "Pending",
    available: Mapping[str, str] | None = None,
    **annotations: str,
) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "GPU",
        "metadata": {
            "name": name,
            "labels": {KEYS.gpupool: pool_name, KEYS.managed_by: node_name},
            "annotations": dict(annotations),
        },
        "status": {
            "phase": phase,
            "capacity": {"tflops": tflops, "vram": vram},
            "available": dict(available or {"tflops": tflops, "vram": vram}),
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "usedBy": "tensor-fusion",
        },
    }


def gpu_node(name: str, pool_name: str, heartbeat: float | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": V1,
        "kind": "GPUNode",
        "metadata": {
            "name": name,
            "labels": {KEYS.managed_by: pool_name, KEYS.pool_member_label(pool_name): "true"},
        },
        "spec": {"manageMode": "AutoSelect"},
        "status": {"phase": "Pending"},
    }
    if heartbeat is not None:
        obj["status"]["hypervisorStatus"] = {
            "hypervisorState": "Running",
            "lastHeartbeatTime": rfc3339(heartbeat),
        }
    return obj


def worker(
    name: str,
    gpus: str,
    node_name: str,
    *,
    namespace: str = "ml",
    phase: str = "Running",
    tflops: str = "100",
    vram: str = "10Gi",
    pool_name: str = "shared",
    **metadata: Any,
) -> dict[str, Any]:
    index, value = encode_index(3)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {KEYS.component: "worker"},
            "annotations": {KEYS.gpupool: pool_name, KEYS.gpu_ids: gpus,
                            KEYS.tflops_request: tflops, KEYS.vram_request: vram},
            "finalizers": [KEYS.finalizer],
            **metadata,
        },
        "spec": {"nodeName": node_name,
                 "containers": [{"name": "c", "resources": {"limits": {index: str(value)}}}]},
        "status": {"phase": phase},
    }  # fmt: skip


def allocator_state(api: FakeApi, *, recover: bool = True) -> AllocatorState:
    """An allocator state over the API's live caches (Pods: the workers)."""
    caches = StateCaches(
        gpus=api.cache("GPU"),
        gpu_nodes=api.cache("GPUNode"),
        nodes=api.cache("Node"),
        pools=api.cache("GPUPool"),
        templates=api.cache("SchedulingConfigTemplate"),
        quotas=api.cache("GPUResourceQuota"),
        pods=api.cache("Pod"),
    )
    state = AllocatorState(caches, IsolationPolicy.STATIC, lambda: NOW)
    if recover:
        state.recover()
    return state


def feed(
    state: AllocatorState, obj: Mapping[str, Any], kind: EventKind = EventKind.MODIFIED
) -> None:
    """Tell the allocator state about a changed object, as its informer handler would."""
    handlers = {"GPU": state.on_gpu, "Pod": state.on_pod, "GPUResourceQuota": state.on_quota,
                "GPUPool": state.on_pool_or_template, "Node": state.on_node,
                "GPUNode": state.on_node}  # fmt: skip
    handlers[str(obj["kind"])](InformerEvent(kind, ObjectKey.of(obj), obj))


async def drain(loop: Any) -> int:
    """Process every key queued on a ReconcileLoop now (not the delayed ones); returns how many."""
    count = 0
    while loop.queue.depth:
        key = await loop.queue.get()
        try:
            await loop.process(key)
        finally:
            loop.queue.done(key)
        count += 1
    return count
