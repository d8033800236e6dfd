"""A simulation runs in a worker thread while the loop changes the live state: its inputs are
copies taken on the loop (`NativeCluster.copy`, `allocator_copy`) and the admission facts are
typed in the thread."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from tensorfusion.app.controller_backend import ControllerBackend
from tensorfusion.domain.allocator.snapshot import allocator_copy
from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster
from tensorfusion.domain.simulate_schedule import simulate_schedule

from ..unit.api_server.fakes import spec_inputs
from ..unit.api_server.test_simulate_schedule_endpoint import guide_pod


def node(name: str, cpu: str = "8") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(cpu: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}


def test_a_native_copy_does_not_see_later_changes_of_the_live_view() -> None:
    live = NativeCluster.from_nodes(NativePlugins(), {"a": node("a"), "b": node("b")})
    live.add_pod("bound", pod("2"))
    live.bind("bound", "a")
    copy = live.copy()
    assert copy.node_names() == ["a", "b"]
    # The loop goes on: a pod binds, a node changes, a node goes.
    live.add_pod("later", pod("5"))
    live.bind("later", "b")
    live.set_node("a", node("a", cpu="1"))
    live.remove_node("b")
    assert copy.node_names() == ["a", "b"]
    assert copy.usage["b"].cpu_milli == 0 and copy.usage["a"].cpu_milli == 2000
    assert copy.facts["a"].allocatable.cpu_milli == 8000
    # The simulation's pod in the copy: admitted where the copy has room, the live view untouched.
    copy.add_pod("sim", pod("6"))
    view = copy.view("sim")
    assert view.admits("a") and view.admits("b") and view.fits_somewhere()
    assert "sim" not in live.pods and live.usage["a"].cpu_milli == 2000
    copy.forget_pod("sim")
    assert live.view("later").admits("a") is False  # the live view's own answer


def test_the_copy_answers_as_the_original() -> None:
    inputs, _ = spec_inputs()
    live = inputs.native
    copy = live.copy()
    on_live = simulate_schedule(
        guide_pod(),
        inputs.preparer(),
        live,
        allocator_copy(inputs.allocator),
        profile=inputs.profile,
    )
    on_copy = simulate_schedule(
        guide_pod(),
        inputs.preparer(),
        copy,
        allocator_copy(inputs.allocator),
        profile=inputs.profile,
    )
    assert on_copy == on_live


class Cache:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.lists = 0

    def list(self) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.objects)


def test_the_controller_hands_out_copies_and_types_the_cache_objects_later() -> None:
    inputs, virtual = spec_inputs()
    live_native = inputs.native
    gpus = Cache([{"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU", "metadata": {"name": "g"},
                   "status": {"phase": "Running"}}])  # fmt: skip
    backend = ControllerBackend(
        client=cast(Any, None), namespace="ns", service_account_name="sa", peer_port=9444,
        isolation=virtual.allocator.isolation_policy, profile=inputs.profile,
        state=cast(Any, SimpleNamespace(allocator=virtual.allocator)),
        native=cast(Any, SimpleNamespace(cluster=live_native)),
        pools=cast(Any, Cache([])), quotas=cast(Any, Cache([])), gpus=cast(Any, gpus),
        informers=[], leading=lambda: True,
    )  # fmt: skip
    taken = backend.simulation_inputs()
    assert taken is not None
    assert taken.native is not live_native
    assert taken.native.node_names() == live_native.node_names()
    assert taken.allocator is not virtual.allocator
    assert taken.allocator.gpus.keys() == virtual.allocator.gpus.keys()
    # A GPU object that arrives after the inputs were taken is not in this simulation's facts.
    gpus.objects.append({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU",
                         "metadata": {"name": "later"}})  # fmt: skip
    preparer = taken.preparer()
    assert [gpu.metadata.name for gpu in preparer.gpus] == ["g"]
