"""A pod that fits nowhere is turned down from bounds, without opening a node, and the fast
decision builds no native reason text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.domain.allocation_request import AllocationRequest, ResourceAmount
from tensorfusion.domain.scheduling.decision import Decision, decide, decide_indexed
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster, PodNativeView
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex
from tensorfusion.domain.scheduling.scheduler_config import read_scheduler_settings
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.virtual_cluster import build_cluster

POOL = "shared"
GIB = 2**30
SETTINGS = read_scheduler_settings(default_scheduler_config())
ARGS = SETTINGS.profile
WEIGHTS = SETTINGS.score_weights


@dataclass
class CountingView:
    """A native view that counts the nodes the decision asks about."""

    view: PodNativeView
    asked: list[str] = field(default_factory=list)

    def rejection(self, node: str) -> tuple[str, str] | None:
        self.asked.append(node)
        return self.view.rejection(node)

    def admits(self, node: str) -> bool:
        self.asked.append(node)
        return self.view.admits(node)

    def fit(self, node: str) -> int:
        return self.view.fit(node)

    def admitted_fit(self, node: str) -> int:
        self.asked.append(node)
        return self.view.admitted_fit(node)

    def fit_bound(self) -> int:
        return self.view.fit_bound()

    def fits_somewhere(self) -> bool:
        return self.view.fits_somewhere()

    def cpu_request(self) -> int:
        return self.view.cpu_request()

    def cpu_free(self, node: str) -> int | None:
        return self.view.cpu_free(node)


class Cluster:
    """Three nodes of two 80Gi, 300-TFLOPs GPUs, 16 CPUs, 64Gi and 3 pod slots each."""

    def __init__(self) -> None:
        cluster = ClusterFile.model_validate({
            "hardware": [{"model": "big", "fp16TFlops": "300", "vram": "80Gi"}],
            "pools": [{"name": POOL, "isDefault": True}],
            "nodes": [{"name": "n", "replicas": 3, "pool": POOL, "cpu": "16", "memory": "64Gi",
                       "pods": 3, "gpus": {"model": "big", "count": 2}}],
        })  # fmt: skip
        self.virtual = build_cluster(cluster)
        self.allocator = self.virtual.allocator
        self.native = NativeCluster.from_nodes(
            NativePlugins(SETTINGS.node_resources_fit), self.virtual.node_objects
        )
        self.index = NodeScoreIndex(self.allocator, ARGS.gpu_fit.weights)
        self.serial = 0

    def pod(
        self,
        cpu: str = "1",
        memory: str = "1Gi",
        count: int = 1,
        amount: ResourceAmount | None = None,
        **need: int,
    ) -> tuple[AllocationRequest, CountingView]:
        self.serial += 1
        uid = f"p{self.serial}"
        manifest: dict[str, Any] = {
            "metadata": {"name": uid, "namespace": "default"},
            "spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ]},
        }  # fmt: skip
        self.native.add_pod(uid, manifest)
        amount = amount or ResourceAmount(**need)
        request = AllocationRequest(
            pool=POOL, namespace="default", pod_name=uid, pod_uid=uid, count=count,
            request=amount, limit=amount,
        )  # fmt: skip
        return request, CountingView(self.native.view(uid))

    def decide(self, request: AllocationRequest, view: CountingView) -> Decision:
        return decide_indexed(self.index, request, view, profile=ARGS, reasons=False)

    def place(self, request: AllocationRequest, view: CountingView) -> str:
        decision = self.decide(request, view)
        assert decision.node is not None, decision
        self.allocator.assume(request, decision.node, decision.gpus, 0.0)
        self.allocator.commit(request.pod_uid, 0.0)
        self.native.bind(request.pod_uid, decision.node)
        return decision.node

    def put(self, gpu: int, node: int, **need: int) -> None:
        """Hold `need` on one GPU (gpu-n-<node>-<gpu>), whatever the placement mode prefers."""
        request, _ = self.pod(amount=ResourceAmount(**need))
        name = f"n-{node}"
        self.allocator.assume(request, name, (f"gpu-{name}-{gpu}",), 0.0)
        self.allocator.commit(request.pod_uid, 0.0)
        self.native.bind(request.pod_uid, name)

    def fits_nowhere(self, request: AllocationRequest, view: CountingView) -> bool:
        full = decide(self.allocator, request, view.view, self.native.node_names(), profile=ARGS)
        return full.node is None


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def vram(gib: int) -> int:
    return gib * GIB


@pytest.mark.parametrize(("cpu", "memory"), [("17", "1Gi"), ("1", "65Gi")], ids=["cpu", "memory"])
def test_more_cpu_or_memory_than_any_node_has_free_opens_no_node(
    cluster: Cluster, cpu: str, memory: str
) -> None:
    request, view = cluster.pod(cpu=cpu, memory=memory, vram_bytes=vram(1))
    assert cluster.decide(request, view).node is None
    assert view.asked == []
    assert cluster.fits_nowhere(request, view)


def test_the_most_free_cpu_still_fits_a_pod_asking_exactly_that(cluster: Cluster) -> None:
    for _ in range(3):
        cluster.place(*cluster.pod(cpu="10", vram_bytes=vram(1)))
    request, view = cluster.pod(cpu="6", vram_bytes=vram(1))
    assert cluster.decide(request, view).node is not None
    request, view = cluster.pod(cpu="7", vram_bytes=vram(1))
    assert cluster.decide(request, view).node is None
    assert view.asked == []


def test_no_pod_slot_left_anywhere_opens_no_node(cluster: Cluster) -> None:
    for _ in range(8):
        cluster.place(*cluster.pod(vram_bytes=vram(1)))
    request, view = cluster.pod(vram_bytes=vram(1))
    assert cluster.place(request, view)  # the ninth slot
    request, view = cluster.pod(vram_bytes=vram(1))
    assert cluster.decide(request, view).node is None
    assert view.asked == []
    assert cluster.fits_nowhere(request, view)


@pytest.mark.parametrize(
    ("fits", "too_much"),
    [
        (ResourceAmount(vram_bytes=40 * GIB), ResourceAmount(vram_bytes=41 * GIB)),
        (ResourceAmount(tflops_milli=150_000), ResourceAmount(tflops_milli=150_001)),
        (ResourceAmount(percent_milli=50_000), ResourceAmount(percent_milli=50_001)),
    ],
    ids=["vram", "tflops", "percent"],
)
def test_more_gpu_capacity_than_any_gpu_has_free_opens_no_node(
    cluster: Cluster, fits: ResourceAmount, too_much: ResourceAmount
) -> None:
    for node in range(3):  # every GPU half taken
        for gpu in range(2):
            cluster.put(gpu, node, vram_bytes=vram(40), tflops_milli=150_000)
    request, view = cluster.pod(amount=too_much)
    assert cluster.decide(request, view).node is None
    assert view.asked == []
    assert cluster.fits_nowhere(request, view)
    request, view = cluster.pod(amount=fits)
    assert cluster.decide(request, view).node is not None


def test_two_gpus_with_room_are_needed_on_one_node(cluster: Cluster) -> None:
    for node in range(3):  # one GPU of each node full
        cluster.put(node % 2, node, vram_bytes=vram(80))
    request, view = cluster.pod(count=2, vram_bytes=vram(1))
    assert cluster.decide(request, view).node is None
    assert view.asked == []
    request, view = cluster.pod(count=1, vram_bytes=vram(80))
    assert cluster.decide(request, view).node is not None


def test_the_fast_decision_builds_no_native_reason(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.place(*cluster.pod(cpu="12", vram_bytes=vram(1)))
    cluster.place(*cluster.pod(cpu="12", vram_bytes=vram(1)))

    def no_text(*_: object) -> None:
        raise AssertionError("a reason text was built")

    monkeypatch.setattr(NativePlugins, "filter", no_text)
    request, view = cluster.pod(cpu="8", vram_bytes=vram(1))
    decision = cluster.decide(request, view)
    assert decision.node is not None
    assert decision.rejections == {}
    assert len(view.asked) == 3  # the two full nodes were opened and turned down
    monkeypatch.undo()
    rejected = [n for n in cluster.native.node_names() if n != decision.node]
    reasons = {view.view.rejection(n) for n in rejected}
    assert reasons == {("NodeResourcesFit", "Insufficient cpu")}


def test_a_removed_node_no_longer_counts_as_room(cluster: Cluster) -> None:
    cluster.put(0, 1, vram_bytes=vram(1))
    cluster.put(0, 2, vram_bytes=vram(1))
    for node in ("n-1", "n-2"):
        for _ in range(2):
            request, view = cluster.pod(cpu="6")
            cluster.native.bind(request.pod_uid, node)
    _, view = cluster.pod(cpu="8")
    assert view.fits_somewhere()
    cluster.native.remove_node("n-0")
    assert not view.fits_somewhere()
