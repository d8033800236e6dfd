"""The enabled-replicas gate (admission.md §8): counter key, gate decision, counter arithmetic,
and the recount that heals the stored count from the live pods.

The counting writes are the webhook's and the pod controller's I/O; this module says what to
write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.admission.hashing import pod_template_hash
from tensorfusion.domain.admission.workload_identity import (
    OwnerKey,
    owner_group,
    owner_key,
)
from tensorfusion.domain.annotation_errors import Code, Problem, problem
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.object_views import annotations_of, controller_of, labels_of

__all__ = [
    "COUNTED_OWNER_KINDS",
    "CounterIncrement",
    "GateDecision",
    "MissingFactError",
    "Recount",
    "RecountObservation",
    "counter_key",
    "decremented_count",
    "evaluate_gate",
    "incremented_count",
    "read_count",
    "recount",
]

# The owner kinds the chart grants get and patch on.
COUNTED_OWNER_KINDS: Final = frozenset(
    {("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("batch", "Job")}
)
_NATIVE_TEMPLATE_HASH: Final = "pod-template-hash"


class MissingFactError(LookupError):
    """The caller did not gather a fact that `facts_needed` asked for (a programming error)."""


@dataclass(frozen=True, slots=True)
class CounterIncrement:
    """Step 16(a): add one to annotation `key` on the owner (optimistic read-modify-write)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    key: str
    observed: int


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Whether the pod gets TF treatment, and what to count."""

    tf_treatment: bool = True
    counter_key: str | None = None
    increment: CounterIncrement | None = None
    warnings: tuple[str, ...] = ()
    problem: Problem | None = None


def counter_key(pod: Mapping[str, Any], keys: Keys) -> str:
    """Existing `pod-counter-key`, else `tf-counter-<pod-template-hash>`, else a template hash."""
    existing = annotations_of(pod).get(keys.pod_counter_key)
    if existing:
        return str(existing)
    template_hash = labels_of(pod).get(_NATIVE_TEMPLATE_HASH)
    return keys.tf_counter(str(template_hash) if template_hash else pod_template_hash(pod))


def read_count(owner: Mapping[str, Any], key: str) -> tuple[int, bool]:
    """(count, corrupt): the owner annotation as a decimal integer; missing = 0, corrupt = 0."""
    value = annotations_of(owner).get(key)
    if value is None:
        return 0, False
    text = str(value).strip()
    if text.isascii() and text.isdigit():
        return int(text), False
    return 0, True


def incremented_count(owner: Mapping[str, Any], key: str) -> str:
    """The annotation value after one more pod (a corrupt value restarts from 0)."""
    return str(read_count(owner, key)[0] + 1)


def decremented_count(owner: Mapping[str, Any], key: str) -> str | None:
    """The value after one pod less; None when the key is to be deleted (result ≤ 0)."""
    result = read_count(owner, key)[0] - 1
    return str(result) if result > 0 else None


def evaluate_gate(
    pod: Mapping[str, Any],
    limit: int | None,
    owners: Mapping[OwnerKey, Mapping[str, Any] | None],
    namespace: str,
    keys: Keys,
) -> GateDecision:
    """Apply `enabled-replicas` = `limit` (None: annotation absent, no gate)."""
    if limit is None:
        return GateDecision()
    if limit == 0:
        return GateDecision(tf_treatment=False)
    controller = controller_of(pod)
    if controller is None or (owner_group(controller), controller.get("kind")) not in (
        COUNTED_OWNER_KINDS
    ):
        what = (
            "no controller owner" if controller is None else f"owner kind {controller.get('kind')}"
        )
        return GateDecision(
            warnings=(
                f"{keys.enabled_replicas} ignored: the pod has {what} "
                "(counted owners: ReplicaSet, StatefulSet, DaemonSet, Job)",
            )
        )
    ref_key = owner_key(controller)
    if ref_key not in owners:
        raise MissingFactError(f"owner {ref_key} was not gathered")
    owner = owners[ref_key]
    if owner is None:
        return GateDecision(
            problem=problem(
                f'{controller.get("kind")} "{controller.get("name")}" not found '
                f"(controller owner of the pod, needed by {keys.enabled_replicas})",
                about="enabled-replicas",
                code=Code.CONFLICT,
            )
        )
    key = counter_key(pod, keys)
    count, corrupt = read_count(owner, key)
    warnings: tuple[str, ...] = ()
    if corrupt:
        warnings = (
            f'{controller.get("kind")} "{controller.get("name")}" annotation {key} is not a '
            "number; counted as 0",
        )
    if count >= limit:
        return GateDecision(tf_treatment=False, warnings=warnings)
    increment = CounterIncrement(
        api_version=ref_key[0],
        kind=ref_key[1],
        name=ref_key[2],
        namespace=namespace,
        key=key,
        observed=count,
    )
    return GateDecision(counter_key=key, increment=increment, warnings=warnings)


@dataclass(frozen=True, slots=True)
class RecountObservation:
    """A recount that found more stored than live: the owner's resourceVersion then, and when."""

    resource_version: str
    at: float


@dataclass(frozen=True, slots=True)
class Recount:
    """What a recount does: `write` the live count (0: delete the key) or nothing (None);
    remember `observation` for the next recount; look again in `recheck_s` (None: no need)."""

    write: int | None = None
    observation: RecountObservation | None = None
    recheck_s: float | None = None


def recount(
    *,
    stored: int,
    live: int,
    resource_version: str,
    seen: RecountObservation | None,
    now: float,
    settle_s: float,
) -> Recount:
    """The stored count against the live pods: raised at once; lowered only when the owner's
    resourceVersion has not moved since a recount at least `settle_s` earlier (an admission in
    flight has counted but its pod is not there yet)."""
    if live >= stored:
        return Recount(write=live if live > stored else None)
    if seen is None or seen.resource_version != resource_version:
        return Recount(observation=RecountObservation(resource_version, now), recheck_s=settle_s)
    waited = now - seen.at
    if waited >= settle_s:
        return Recount(write=live)
    return Recount(observation=seen, recheck_s=settle_s - waited)
