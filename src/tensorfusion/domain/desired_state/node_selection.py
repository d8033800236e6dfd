"""Which pool a Kubernetes Node belongs to, and the GPUNode that stands for it (api.md §2.3,
deployment.md §10 step 1).

The controller considers the nodes matching its initial label selector (env
`INITIAL_GPU_NODE_LABEL_SELECTOR`, default `nvidia.com/gpu.present=true`, a label-selector string
as `kubectl -l` takes it). Among those, a node joins the first pool (by name) whose
`nodeManagerConfig.nodeSelector` matches it, else whose `multiVendorNodeSelector` does (the
map's key is then the node's vendor); a pool with neither selector takes every considered node.
Terms kube-scheduler could not parse match nothing (`scheduling.native.node_affinity`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.objects import owner_reference
from tensorfusion.domain.model.meta import API_VERSION
from tensorfusion.domain.object_views import (
    Obj,
    controller_of,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    uid_of,
)
from tensorfusion.domain.scheduling.native.node import NodeFacts
from tensorfusion.domain.scheduling.native.node_affinity import AffinityTerm

__all__ = [
    "LabelQuery",
    "LabelQueryError",
    "PoolMatch",
    "gpu_node_body",
    "gpu_node_metadata_patch",
    "is_managed_gpu_node",
    "parse_label_query",
    "pool_for_node",
]

_SET_TERM: Final = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQUALITY_TERM: Final = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_TERM: Final = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")
_DEFAULT_VENDOR: Final = "NVIDIA"


class LabelQueryError(ValueError):
    """A label-selector string that does not parse; the message names the term."""


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "in":
            return value is not None and value in self.values
        if self.operator == "notin":
            return value is None or value not in self.values
        if self.operator == "exists":
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class LabelQuery:
    """A parsed label-selector string; every requirement must hold (an empty one matches all)."""

    text: str
    requirements: tuple[_Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether labels satisfy every requirement."""
        return all(requirement.matches(labels) for requirement in self.requirements)


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:position])
            start = position + 1
    terms.append(text[start:])
    return terms


def parse_label_query(text: str) -> LabelQuery:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k` as `kubectl -l` does."""
    requirements = []
    if not text.strip():
        return LabelQuery(text)
    for term in _split_terms(text):
        if match := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in match[3].split(",") if v.strip())
            if not values:
                raise LabelQueryError(f"label selector {text!r}: {term.strip()!r} lists no values")
            requirements.append(_Requirement(match[1], match[2], values))
        elif match := _EQUALITY_TERM.match(term):
            operator = "notin" if match[2] == "!=" else "in"
            requirements.append(_Requirement(match[1], operator, frozenset({match[3]})))
        elif match := _EXISTS_TERM.match(term):
            requirements.append(_Requirement(match[2], "!" if match[1] else "exists"))
        else:
            raise LabelQueryError(
                f"label selector {text!r}: cannot parse {term.strip()!r} (expected key=value, "
                "key!=value, key in (a,b), key notin (a,b), key or !key)"
            )
    return LabelQuery(text, tuple(requirements))


@dataclass(frozen=True, slots=True)
class PoolMatch:
    """The pool a node joins, its vendor, and the other pools that would also take it."""

    pool: str
    vendor: str
    others: tuple[str, ...] = ()


def _terms(selector: object) -> tuple[AffinityTerm, ...] | None:
    """The compiled terms of a NodeSelector; None when absent."""
    if not isinstance(selector, Mapping):
        return None
    raw = selector.get("nodeSelectorTerms")
    if not isinstance(raw, list):
        return ()
    return tuple(AffinityTerm.parse(term) for term in raw)


def _pool_vendor_match(pool: Obj, node: NodeFacts) -> str | None:
    """The vendor under which the pool takes the node, or None when it does not."""
    spec = pool.get("spec") if isinstance(pool.get("spec"), Mapping) else {}
    manager = spec.get("nodeManagerConfig") if isinstance(spec, Mapping) else None
    manager = manager if isinstance(manager, Mapping) else {}
    default_vendor = str(manager.get("defaultVendor") or _DEFAULT_VENDOR)
    selector = _terms(manager.get("nodeSelector"))
    by_vendor = manager.get("multiVendorNodeSelector")
    by_vendor = by_vendor if isinstance(by_vendor, Mapping) else {}
    if selector is None and not by_vendor:
        return default_vendor
    if selector is not None and any(term.matches(node) for term in selector):
        return default_vendor
    for vendor in sorted(by_vendor):
        terms = _terms(by_vendor[vendor])
        if terms and any(term.matches(node) for term in terms):
            return str(vendor)
    return None


def pool_for_node(node: Obj, pools: Iterable[Obj], initial: LabelQuery) -> PoolMatch | None:
    """The pool the node joins (first by name among those that match), or None."""
    labels = labels_of(node)
    if not initial.matches(labels):
        return None
    facts = NodeFacts(name=name_of(node), labels=labels)
    found: list[tuple[str, str]] = []
    for pool in sorted(pools, key=name_of):
        if is_deleting(pool) or not name_of(pool):
            continue
        vendor = _pool_vendor_match(pool, facts)
        if vendor is not None:
            found.append((name_of(pool), vendor))
    if not found:
        return None
    (pool_name, vendor), others = found[0], tuple(name for name, _ in found[1:])
    return PoolMatch(pool_name, vendor, others)


def is_managed_gpu_node(gpu_node: Obj) -> bool:
    """Whether the controller manages this GPUNode: it carries the pool label or a GPUPool
    controller reference, and is not `manageMode: Manual`."""
    spec = gpu_node.get("spec")
    if isinstance(spec, Mapping) and spec.get("manageMode") == "Manual":
        return False
    owner = controller_of(gpu_node)
    owned = owner is not None and owner.get("kind") == "GPUPool"
    return owned or KEYS.managed_by in labels_of(gpu_node)


def _node_labels(pool: str, vendor: str) -> dict[str, str]:
    return {
        KEYS.managed_by: pool,
        KEYS.pool_member_label(pool): "true",
        KEYS.hardware_vendor: vendor,
    }


def gpu_node_body(node_name: str, pool: Obj, vendor: str) -> dict[str, Any]:
    """The GPUNode to create for a node that joins `pool`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUNode",
        "metadata": {
            "name": node_name,
            "labels": _node_labels(name_of(pool), vendor),
            "ownerReferences": [owner_reference(pool, "GPUPool")],
        },
        "spec": {"manageMode": "AutoSelect"},
    }


def gpu_node_metadata_patch(gpu_node: Obj, pool: Obj, vendor: str) -> dict[str, Any] | None:
    """The merge patch that moves a GPUNode's labels and controller reference to `pool` (other
    pools' membership labels removed, other owners kept); None when nothing changes."""
    pool_name = name_of(pool)
    labels = labels_of(gpu_node)
    wanted = _node_labels(pool_name, vendor)
    member_prefix = KEYS.pool_member_label("")
    label_patch: dict[str, Any] = {k: v for k, v in wanted.items() if labels.get(k) != v}
    for key in labels:
        if key.startswith(member_prefix) and key not in wanted:
            label_patch[key] = None
    patch: dict[str, Any] = {}
    if label_patch:
        patch["labels"] = label_patch
    references = [
        dict(r)
        for r in metadata_of(gpu_node).get("ownerReferences") or ()
        if isinstance(r, Mapping)
    ]
    owner = controller_of(gpu_node)
    if owner is None or owner.get("uid") != uid_of(pool) or owner.get("kind") != "GPUPool":
        kept = [r for r in references if r.get("controller") is not True]
        patch["ownerReferences"] = [*kept, owner_reference(pool, "GPUPool")]
    return {"metadata": patch} if patch else None
