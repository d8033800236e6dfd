"""Which TensorFusionWorkload a pod belongs to (admission.md §4 step 3).

Owners are given as objects fetched by the caller, keyed by `owner_key(ownerRef)`; a key mapped
to None means the object was not found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.admission.hashing import hashed_name_suffix
from tensorfusion.domain.object_views import controller_of, labels_of, metadata_of, name_of

__all__ = [
    "OwnerKey",
    "WorkloadIdentity",
    "intermediate_owner",
    "owner_group",
    "owner_key",
    "resolve_workload_identity",
]

OwnerKey = tuple[str, str, str]

# Intermediate controllers whose own controller is the workload: ReplicaSet → Deployment,
# Job → CronJob.
_INTERMEDIATE: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("apps", "ReplicaSet"): ("apps", "Deployment"),
    ("batch", "Job"): ("batch", "CronJob"),
}


def owner_group(ref: Mapping[str, Any]) -> str:
    """API group of an ownerRef (`apps` for `apps/v1`, "" for core `v1`)."""
    api_version = str(ref.get("apiVersion", ""))
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def owner_key(ref: Mapping[str, Any]) -> OwnerKey:
    """(apiVersion, kind, name) of an ownerRef: the key of `AdmissionFacts.owners`."""
    return (str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref.get("name", "")))


def intermediate_owner(ref: Mapping[str, Any]) -> bool:
    """True for a ReplicaSet or Job, whose own controller may be the workload."""
    return (owner_group(ref), str(ref.get("kind", ""))) in _INTERMEDIATE


@dataclass(frozen=True, slots=True)
class WorkloadIdentity:
    """Workload name, the pod's direct controller and the root controller (both ownerRefs)."""

    name: str
    controller: Mapping[str, Any] | None = None
    root: Mapping[str, Any] | None = None


def resolve_workload_identity(
    pod: Mapping[str, Any],
    owners: Mapping[OwnerKey, Mapping[str, Any] | None],
    name_suffix: str | None,
) -> WorkloadIdentity:
    """Root controller name; else the pod name; else `<generateName>-<suffix>`."""
    controller = controller_of(pod)
    if controller is not None:
        root = controller
        if intermediate_owner(controller):
            owner = owners.get(owner_key(controller))
            parent = controller_of(owner) if owner else None
            expected = _INTERMEDIATE[(owner_group(controller), str(controller.get("kind")))]
            if parent is not None and (owner_group(parent), parent.get("kind")) == expected:
                root = parent
        return WorkloadIdentity(str(root.get("name", "")), controller, root)
    name = name_of(pod)
    if name:
        return WorkloadIdentity(name)
    base = str(metadata_of(pod).get("generateName") or "pod").rstrip("-") or "pod"
    suffix = name_suffix or hashed_name_suffix(base + repr(sorted(labels_of(pod).items())))
    return WorkloadIdentity(f"{base}-{suffix}")
