"""Fakes of the extender's pod calls and events, and a harness around `Extender`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.records import RecordState
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.scheduling.extender_protocol import ExtenderArgs, ExtenderBindingArgs
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.scheduling.scheduler_config import read_scheduler_settings
from tensorfusion.extender.scheduling import Extender
from tensorfusion.runtime.leader_election import NotLeaderError

from ..allocator.builders import POOL, allocator_with, gpu

SETTINGS = read_scheduler_settings(default_scheduler_config())
NODES = ("node-a", "node-b")


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                       "nvidia.com/gpu": "8"}}}  # fmt: skip


def worker(uid: str = "u1", tflops: str = "100") -> dict[str, Any]:
    index, value = encode_index(3)
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid,
                     "labels": {KEYS.component: "worker"},
                     "annotations": {KEYS.gpupool: POOL, KEYS.tflops_request: tflops,
                                     KEYS.vram_request: "10Gi"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {index: str(value)}}}]},
    }  # fmt: skip


def left_behind(uid: str = "u1") -> dict[str, Any]:
    """A worker carrying a bind annotation an earlier bind wrote and this one does not set
    (the bind removes it with a patch before its Binding)."""
    pod = worker(uid)
    pod["metadata"]["annotations"][KEYS.container_gpus] = '{"main":["zz"]}'
    return pod


@dataclass
class FakePods:
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    patch_failures: int = 0
    bind_error: Exception | None = None
    bound_anyway: bool = False
    allocator: Allocator | None = None
    states_at_bind: list[RecordState] = field(default_factory=list)
    timeouts: list[tuple[str, float | None]] = field(default_factory=list)
    """The `timeout_s` each write was given, as (call, seconds)."""
    after_write: Callable[[str], None] | None = None
    """Runs after each write the fake applied, with the call's name (`patch`, `bind`)."""

    def add(self, pod: dict[str, Any]) -> None:
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get")
        return self.pods.get((namespace, name))

    async def patch_pod(
        self, namespace: str, name: str, operations: Sequence[Mapping[str, Any]], *,
        timeout_s: float | None = None,
    ) -> None:  # fmt: skip
        self.calls.append("patch")
        self.timeouts.append(("patch", timeout_s))
        if self.patch_failures:
            self.patch_failures -= 1
            raise RuntimeError("500: etcd is unhappy")
        annotations = self.pods[(namespace, name)]["metadata"].setdefault("annotations", {})
        for op in operations:
            key = op["path"].rsplit("/", 1)[1].replace("~1", "/")
            if op["op"] == "remove":
                annotations.pop(key, None)
            else:
                annotations[key] = op["value"]
        if self.after_write is not None:
            self.after_write("patch")

    async def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, *,
        annotations: Mapping[str, str] | None = None, timeout_s: float | None = None,
    ) -> None:  # fmt: skip
        self.calls.append("bind")
        self.timeouts.append(("bind", timeout_s))
        if self.allocator is not None and uid in self.allocator.records:
            self.states_at_bind.append(self.allocator.records[uid].state)
        pod = self.pods[(namespace, name)]
        if self.bind_error is not None:
            if self.bound_anyway:
                _bind(pod, node, annotations)
            raise self.bind_error
        _bind(pod, node, annotations)
        if self.after_write is not None:
            self.after_write("bind")


def _bind(pod: dict[str, Any], node: str, annotations: Mapping[str, str] | None) -> None:
    """What the API server does with a Binding: `nodeName` and the annotations, at once."""
    pod.setdefault("spec", {})["nodeName"] = node
    pod["metadata"].setdefault("annotations", {}).update(annotations or {})


@dataclass
class FakeEvents:
    recorded: list[tuple[str, str, str, str]] = field(default_factory=list)

    def pod_event(
        self, pod: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str,
        message: str,
    ) -> None:  # fmt: skip
        self.recorded.append((pod["metadata"]["name"], type_, reason, message))


class NoCache:
    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return None

    def list(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        return []


@dataclass
class Harness:
    allocator: Allocator
    pods: FakePods
    events: FakeEvents
    extender: Extender
    leading: list[bool]
    slept: list[float]


@pytest.fixture
def h() -> Harness:
    return make_harness()


def make_harness(fence: Callable[[], float] | None = None) -> Harness:
    """The extender on two one-GPU nodes; `fence` defaults to 10 s left while `leading[0]`."""
    allocator = allocator_with(gpu("a1", "node-a"), gpu("b1", "node-b"))
    native = NativeCluster.from_nodes(NativePlugins(SETTINGS.node_resources_fit),
                                      {name: node(name) for name in NODES})  # fmt: skip
    pods, events, leading, slept = FakePods(allocator=allocator), FakeEvents(), [True], []

    def leading_fence() -> float:
        if not leading[0]:
            raise NotLeaderError("lost the Lease")
        return 10.0

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    extender = Extender(
        allocator=lambda: allocator, native=native, pods=pods, cache=NoCache(), events=events,
        fence=fence or leading_fence, profile=SETTINGS.profile,
        clock=lambda: 100.0, sleep=sleep,
    )  # fmt: skip
    return Harness(allocator, pods, events, extender, leading, slept)


def args_for(pod: dict[str, Any], names: Sequence[str] = NODES) -> ExtenderArgs:
    return ExtenderArgs(pod, tuple(names))


def binding(pod: dict[str, Any], node: str) -> ExtenderBindingArgs:
    meta = pod["metadata"]
    return ExtenderBindingArgs(meta["name"], meta["namespace"], meta["uid"], node)


async def place(h: Harness, pod: dict[str, Any]) -> str:
    h.pods.add(pod)
    result = await h.extender.filter(args_for(pod))
    [chosen] = result.node_names
    return chosen
