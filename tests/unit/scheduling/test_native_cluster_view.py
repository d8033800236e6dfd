"""The native view of a set of nodes, as the simulator and the extender keep it up to date."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.scheduling.native import NativePlugins
from tensorfusion.domain.scheduling.native.cluster_view import NativeCluster

from .test_native import SHIPPED_ARGS

PLUGINS = NativePlugins(SHIPPED_ARGS)


def node(name: str, cpu: str = "64", memory: str = "256Gi", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod(cpu: str = "1", memory: str = "1Gi", **selector: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def test_a_node_update_invalidates_cached_outcomes() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a")})
    cluster.add_pod("p", pod(zone="x"))
    view = cluster.view("p")
    assert view.rejection("a") == (
        "NodeAffinity",
        "node(s) didn't match Pod's node affinity/selector",
    )
    cluster.set_node("a", node("a", zone="x"))
    assert view.rejection("a") is None


def test_an_unknown_node_is_rejected_and_a_removed_node_disappears() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a"), "b": node("b")})
    cluster.add_pod("p", pod())
    view = cluster.view("p")
    assert view.rejection("zz") == ("NodeNotFound", 'node "zz" not found')
    cluster.remove_node("b")
    assert cluster.node_names() == ["a"]
    assert view.rejection("b") is not None


def test_binding_moves_requests_between_nodes_and_raises_fit() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a"), "b": node("b")})
    cluster.add_pod("big", pod(cpu="32", memory="128Gi"))
    cluster.add_pod("p", pod())
    view = cluster.view("p")
    empty = view.fit("a")
    cluster.bind("big", "a")
    assert view.fit("a") > empty
    cluster.bind("big", "b")
    assert view.fit("a") == empty and view.fit("b") > empty
    assert cluster.usage["a"].cpu_milli == 0
    cluster.forget_pod("big")
    assert cluster.usage["b"].cpu_milli == 0


@dataclass(frozen=True)
class Step:
    kind: str
    node: int
    cpu: int
    memory: int


steps = st.lists(
    st.builds(
        Step,
        kind=st.sampled_from(["bind", "unbind", "resize-node", "remove-node", "add-node"]),
        node=st.integers(0, 4),
        cpu=st.integers(1, 64),
        memory=st.integers(1, 256),
    ),
    max_size=40,
)


@settings(deadline=None)
@given(steps, st.integers(1, 16), st.integers(1, 64))
def test_the_fit_bound_is_never_below_the_fit_of_any_node(
    sequence: list[Step], pod_cpu: int, pod_memory: int
) -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {f"n{i}": node(f"n{i}") for i in range(3)})
    cluster.add_pod("probe", pod(str(pod_cpu), f"{pod_memory}Gi"))
    for i, step in enumerate(sequence):
        name = f"n{step.node}"
        if step.kind == "bind" and name in cluster.facts:
            uid = f"p{i}"
            cluster.add_pod(uid, pod(str(step.cpu), f"{step.memory}Gi"))
            cluster.bind(uid, name)
        elif step.kind == "unbind" and cluster.bound:
            cluster.unbind(sorted(cluster.bound)[step.node % len(cluster.bound)])
        elif step.kind in ("resize-node", "add-node"):
            cluster.set_node(name, node(name, str(step.cpu), f"{step.memory}Gi"))
        elif step.kind == "remove-node":
            cluster.remove_node(name)
        view = cluster.view("probe")
        bound = view.fit_bound()
        for candidate in cluster.node_names():
            assert view.fit(candidate) <= bound, (candidate, view.fit(candidate), bound)


def test_forgetting_pods_frees_their_outcomes_and_never_mixes_up_later_pods() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a", zone="x")})
    cluster.add_pod("p1", pod(zone="x"))
    assert cluster.view("p1").rejection("a") is None
    cluster.add_pod("p2", pod(zone="y"))
    assert cluster.view("p2").rejection("a") is not None
    cluster.forget_pod("p1")
    assert all(len(memo) == 1 for memo in cluster.outcomes.values())
    cluster.add_pod("p3", pod(zone="x"))
    assert cluster.view("p3").rejection("a") is None
    assert cluster.view("p2").rejection("a") is not None


def test_pods_of_one_class_share_their_outcomes_until_the_last_one_is_forgotten() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a", cpu="2")})
    first, second = pod(cpu="3"), pod(cpu="3")
    second["metadata"]["name"] = "q"
    cluster.add_pod("p1", first)
    cluster.add_pod("p2", second)
    rejection = cluster.view("p1").rejection("a")
    assert rejection is not None
    assert len(cluster.outcomes["a"]) == 1  # the second pod's outcome is the first one's
    assert cluster.view("p2").rejection("a") == rejection
    assert len(cluster.outcomes["a"]) == 1
    cluster.forget_pod("p1")
    assert len(cluster.outcomes["a"]) == 1
    cluster.forget_pod("p2")
    assert cluster.outcomes["a"] == {}
    cluster.add_pod("p3", pod(cpu="1"))
    assert cluster.view("p3").rejection("a") is None


def test_a_pod_added_again_under_its_uid_leaves_its_old_class() -> None:
    cluster = NativeCluster.from_nodes(PLUGINS, {"a": node("a", cpu="2")})
    cluster.add_pod("p1", pod(cpu="3"))
    assert not cluster.view("p1").admits("a")
    cluster.add_pod("p1", pod(cpu="1"))
    assert cluster.view("p1").admits("a")
    cluster.forget_pod("p1")
    assert cluster.outcomes["a"] == {}
