"""Merge patches, label-selector strings, which pool a node joins, and its GPUNode."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.node_selection import (
    LabelQueryError,
    gpu_node_body,
    gpu_node_metadata_patch,
    is_managed_gpu_node,
    parse_label_query,
    pool_for_node,
)
from tensorfusion.domain.desired_state.objects import Exactly, merge_patch
from tensorfusion.domain.timestamps import parse_rfc3339

GPU_PRESENT = parse_label_query("nvidia.com/gpu.present=true")


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", **labels}}}


def pool(name: str, uid: str = "", **manager: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid or f"uid-{name}"},
            "spec": {"nodeManagerConfig": manager}}  # fmt: skip


def terms(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_merge_patch_touches_only_named_fields_and_replaces_exact_maps() -> None:
    current: dict[str, Any] = {
        "phase": "Pending",
        "nodeInfo": {"ramSize": "1Gi"},
        "hypervisorStatus": {"hypervisorState": "Running", "lastHeartbeatTime": "t"},
        "allocatedPods": {"gpu-a": [{"uid": "1"}], "gpu-b": [{"uid": "2"}]},
    }
    desired = {
        "phase": "Running",
        "hypervisorStatus": {"hypervisorState": "Stale"},
        "allocatedPods": Exactly({"gpu-b": [{"uid": "2"}], "gpu-c": [{"uid": "3"}]}),
        "cluster": None,
    }
    assert merge_patch(current, desired) == {
        "phase": "Running",
        "hypervisorStatus": {"hypervisorState": "Stale"},
        "allocatedPods": {"gpu-a": None, "gpu-c": [{"uid": "3"}]},
    }
    assert merge_patch({**current, "cluster": "x"}, {"cluster": None}) == {"cluster": None}
    assert merge_patch(current, {"phase": "Pending", "allocatedPods": Exactly(
        current["allocatedPods"])}) == {}  # fmt: skip
    # An exact map inside an exact map loses its stale keys too.
    partitions = {"uid-1": {"templateId": "a", "allocatedSlotStart": 1}}
    assert merge_patch({"p": partitions}, {"p": Exactly({"uid-1": {"templateId": "a"}})}) == {
        "p": {"uid-1": {"allocatedSlotStart": None}}
    }
    assert merge_patch({}, {"p": Exactly({})}) == {}


def test_parse_rfc3339_reads_rfc3339_and_refuses_the_rest() -> None:
    assert parse_rfc3339("2027-01-15T08:00:00Z") == 1_800_000_000.0
    assert parse_rfc3339("2027-01-15T09:00:00+01:00") == 1_800_000_000.0
    assert parse_rfc3339("2027-01-15T08:00:00") is None  # no zone
    assert parse_rfc3339("yesterday") is None
    assert parse_rfc3339(None) is None


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("", {}, True),
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a!=1", {"a": "1"}, False),
        ("a in (1, 2),b", {"a": "2", "b": ""}, True),
        ("a in (1,2),b", {"a": "2"}, False),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {"a": "1"}, False),
        ("!a", {"a": "x"}, False),
        ("!a, c=d", {"c": "d"}, True),
        ("nvidia.com/gpu.present=true", {"nvidia.com/gpu.present": "true"}, True),
    ],
)
def test_label_selector_strings_match_as_kubectl_does(
    text: str, labels: dict[str, str], matches: bool
) -> None:
    assert parse_label_query(text).matches(labels) is matches


@pytest.mark.parametrize("text", ["a=b=c", "a in ()", "=x", "a in (b"])
def test_a_bad_label_selector_string_is_refused_naming_the_term(text: str) -> None:
    with pytest.raises(LabelQueryError, match="label selector"):
        parse_label_query(text)


def test_a_node_joins_the_first_pool_whose_selector_matches() -> None:
    a100 = node("n1", model="a100", zone="z1")
    pools = [
        pool("zeta", nodeSelector=terms(expr("model", "In", "a100"))),
        pool("alpha", nodeSelector=terms(expr("zone", "In", "z1"))),
        pool("beta", nodeSelector=terms(expr("model", "In", "h100"))),
    ]
    match = pool_for_node(a100, pools, GPU_PRESENT)
    assert match is not None
    assert (match.pool, match.vendor, match.others) == ("alpha", "NVIDIA", ("zeta",))
    assert pool_for_node(node("n2", model="l4"), pools, GPU_PRESENT) is None
    # The initial selector comes first: a node without the GPU label is never considered.
    bare = {"metadata": {"name": "n3", "labels": {"zone": "z1"}}}
    assert pool_for_node(bare, pools, GPU_PRESENT) is None
    assert pool_for_node(bare, pools, parse_label_query("zone=z1")) is not None


def test_pool_selectors_multi_vendor_defaults_and_deleted_pools() -> None:
    amd = node("n1", vendor="amd")
    amd_terms = {"AMD": terms(expr("vendor", "In", "amd"))}
    by_vendor = pool("amd-pool", defaultVendor="NVIDIA", multiVendorNodeSelector=amd_terms)
    match = pool_for_node(amd, [by_vendor], GPU_PRESENT)
    assert match is not None and match.vendor == "AMD"
    takes_all = pool("all", defaultVendor="Acme")
    match = pool_for_node(amd, [takes_all], GPU_PRESENT)
    assert match is not None and (match.pool, match.vendor) == ("all", "Acme")
    deleting = {
        **takes_all,
        "metadata": {"name": "all", "deletionTimestamp": "2027-01-01T00:00:00Z"},
    }
    assert pool_for_node(amd, [deleting], GPU_PRESENT) is None
    # A term kube-scheduler cannot parse matches nothing; so does an empty term list.
    broken = pool("broken", nodeSelector=terms(expr("vendor", "Gt", "x")))
    empty = pool("empty", nodeSelector={"nodeSelectorTerms": []})
    assert pool_for_node(amd, [broken, empty], GPU_PRESENT) is None


def test_the_gpu_node_body_and_its_move_to_another_pool() -> None:
    shared = pool("shared")
    body = gpu_node_body("n1", shared, "NVIDIA")
    assert body["metadata"]["labels"] == {
        KEYS.managed_by: "shared",
        KEYS.pool_member_label("shared"): "true",
        KEYS.hardware_vendor: "NVIDIA",
    }
    assert body["metadata"]["ownerReferences"] == [{
        "apiVersion": "tensor-fusion.ai/v1", "kind": "GPUPool", "name": "shared",
        "uid": "uid-shared", "controller": True, "blockOwnerDeletion": True,
    }]  # fmt: skip
    assert is_managed_gpu_node(body)
    assert gpu_node_metadata_patch(body, shared, "NVIDIA") is None
    other_owner = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid"}
    body["metadata"]["ownerReferences"].append(other_owner)
    body["metadata"]["labels"]["team"] = "ml"
    moved = gpu_node_metadata_patch(body, pool("train"), "NVIDIA")
    assert moved is not None
    assert moved["metadata"]["labels"] == {
        KEYS.managed_by: "train",
        KEYS.pool_member_label("train"): "true",
        KEYS.pool_member_label("shared"): None,
    }
    references = moved["metadata"]["ownerReferences"]
    assert [r["name"] for r in references] == ["n1", "train"]
    manual = {**body, "spec": {"manageMode": "Manual"}}
    assert not is_managed_gpu_node(manual)
    assert not is_managed_gpu_node({"metadata": {"name": "hand-made"}})
