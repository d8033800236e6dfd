"""What admission needs to know about the cluster: the shell gathers it, the core decides.

`facts_needed(pod, ...)` says which objects to fetch for a pod; the shell fetches them (from its
caches or the API server) and passes an `AdmissionFacts` to `admit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.auto_migration import AutoMigrationConfig
from tensorfusion.domain.admission.replica_gate import COUNTED_OWNER_KINDS
from tensorfusion.domain.admission.workload_identity import (
    OwnerKey,
    intermediate_owner,
    owner_group,
)
from tensorfusion.domain.annotation_errors import Problem
from tensorfusion.domain.annotations import KEYS, Keys
from tensorfusion.domain.model import GPU, GPUPool, GPUResourceQuota, WorkloadProfile
from tensorfusion.domain.native_resources import DEFAULT_NATIVE_RESOURCES, has_native_gpus
from tensorfusion.domain.object_views import annotations_of, controller_of, labels_of

__all__ = ["AUTO_MIGRATION_OFF", "AdmissionFacts", "FactNeeds", "InvalidObject", "facts_needed"]

AUTO_MIGRATION_OFF = AutoMigrationConfig()


@dataclass(frozen=True, slots=True)
class InvalidObject:
    """A gathered object that does not match its model: what admission needs to report it.

    - `kind`, `name`: e.g. `WorkloadProfile`, `small`.
    - `problems`: one per bad field, `<Kind> "<name>" <field>: invalid value "<value>": <rule>`,
      ranked as the annotation that brought the object in (`workload-profile`, `gpupool`).
    - `default_pool`: a GPUPool annotated `is-default-pool: "true"` (a default-pool candidate).
    - `gpu_model`: a GPU's `status.gpuModel` when readable (whether `dedicated-gpu` cares).
    """

    kind: str
    name: str
    problems: tuple[Problem, ...]
    default_pool: bool = False
    gpu_model: str | None = None

    @property
    def details(self) -> str:
        """Every problem message, joined by "; "."""
        return "; ".join(item.message for item in self.problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionFacts:
    """Everything `admit` reads besides the pod.

    Our CRD objects are typed models (load raw ones with `load_as`, or build the whole record
    with `load_facts`); pods and owner objects are plain JSON dicts.

    - `namespace`: the request namespace (used when the pod has none).
    - `pools`: GPUPools by name: the annotated pool, or every pool when the pod names none.
    - `profile`: the referenced WorkloadProfile; None when not referenced or not found.
    - `quota`: the namespace's effective GPUResourceQuota, if any.
    - `gpus`: GPU objects (read only for `dedicated-gpu: "true"`).
    - `native_resources`: native GPU resource name → vendor (ProviderConfig
      `inUseResourceNames`; fallback nvidia.com/gpu → NVIDIA, amd.com/gpu → AMD).
    - `owners`: owner objects keyed by `owner_key(ownerRef)`; None = NotFound.
    - `namespace_labels`: labels of the pod's Namespace; None = not read or unreadable.
    - `auto_migration`: dynamic config `autoMigration`, read by `read_auto_migration`.
    - `progressive_migration`: `controller.nvidiaOperatorProgressiveMigration`.
    - `pod_index`: the index p (1..128) to put on the pod: the leader's `PodIndexCounter.take()`,
      or `peek()` on a dry run.
    - `name_suffix`: 8 chars of `[1-9a-km-y]` for a generated workload name (None: derived).
    - `dry_run`: the shell will skip every write; the decision is the same.
    - `warnings`: warnings from gathering (e.g. the random index fallback), kept first.
    - `invalid_objects`: gathered objects that did not load (see `load_facts`): a referenced
      profile or the chosen pool denies the pod (400), a quota is not enforced and a GPU is
      skipped (each with a warning).
    """

    namespace: str
    pod_index: int
    pools: Mapping[str, GPUPool] = field(default_factory=dict)
    profile: WorkloadProfile | None = None
    quota: GPUResourceQuota | None = None
    gpus: Sequence[GPU] = ()
    native_resources: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_NATIVE_RESOURCES)
    )
    owners: Mapping[OwnerKey, Mapping[str, Any] | None] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] | None = None
    auto_migration: AutoMigrationConfig = AUTO_MIGRATION_OFF
    progressive_migration: bool = False
    name_suffix: str | None = None
    dry_run: bool = False
    warnings: tuple[str, ...] = ()
    invalid_objects: tuple[InvalidObject, ...] = ()
    keys: Keys = KEYS

    def invalid(self, kind: str) -> dict[str, InvalidObject]:
        """The invalid objects of one kind, by name."""
        return {item.name: item for item in self.invalid_objects if item.kind == kind}


@dataclass(frozen=True, slots=True)
class FactNeeds:
    """What the shell must fetch before calling `admit` for a pod.

    - `tf_candidate`: the TF pipeline may run; when False nothing else is needed.
    - `profile`: WorkloadProfile name in the pod namespace.
    - `pool_names`: the pools to GET; None = list every pool (default-pool lookup).
    - `owners`: ownerRefs to GET (pod namespace), to fill `AdmissionFacts.owners`.
    - `fresh_owners`: the owners must be read now (their enabled-replicas count); else they
      are read for the workload's identity only, which a short-lived cache may answer.
    - `quota`, `gpus`, `namespace_labels`, `pod_index`: whether those facts are needed.
    """

    tf_candidate: bool = False
    profile: str | None = None
    pool_names: tuple[str, ...] | None = ()
    owners: tuple[Mapping[str, Any], ...] = ()
    fresh_owners: bool = False
    quota: bool = False
    gpus: bool = False
    namespace_labels: bool = False
    pod_index: bool = False


def facts_needed(
    pod: Mapping[str, Any],
    *,
    native_resources: Mapping[str, str] = DEFAULT_NATIVE_RESOURCES,
    auto_migration: AutoMigrationConfig = AUTO_MIGRATION_OFF,
    keys: Keys = KEYS,
) -> FactNeeds:
    """The facts `admit` will read for this pod, so the shell never fetches blindly."""
    label = labels_of(pod).get(keys.enabled)
    annotations = annotations_of(pod)
    namespace_labels = False
    if label != "true":
        if label == "false" or not auto_migration.enable:
            return FactNeeds()
        if not has_native_gpus(pod, native_resources):
            return FactNeeds()
        namespace_labels = auto_migration.needs_namespace_labels
    if annotations.get(keys.enabled_replicas, "").strip() == "0":
        return FactNeeds(namespace_labels=namespace_labels)
    owners: tuple[Mapping[str, Any], ...] = ()
    controller = controller_of(pod)
    if controller is not None and (
        intermediate_owner(controller)
        or (
            keys.enabled_replicas in annotations
            and (owner_group(controller), controller.get("kind")) in COUNTED_OWNER_KINDS
        )
    ):
        owners = (controller,)
    pool = annotations.get(keys.gpupool)
    return FactNeeds(
        tf_candidate=True,
        profile=annotations.get(keys.workload_profile) or None,
        pool_names=(pool,) if pool else None,
        owners=owners,
        fresh_owners=keys.enabled_replicas in annotations,
        quota=True,
        gpus=annotations.get(keys.dedicated_gpu) == "true",
        namespace_labels=namespace_labels,
        pod_index=True,
    )
