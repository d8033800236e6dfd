"""Admission facts from raw API objects; an object that does not load is kept as `InvalidObject`.

The shell keeps typed objects; tests, tools and the shell's own loaders turn raw JSON into them
with `read_object` (and `read_profile_object` for WorkloadProfiles), or build the whole record
with `load_facts`. Neither raises for an invalid object: what admission does with one is its
own decision (`AdmissionFacts.invalid_objects`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

from tensorfusion.domain.admission.auto_migration import AutoMigrationConfig, read_auto_migration
from tensorfusion.domain.admission.facts import AdmissionFacts, InvalidObject
from tensorfusion.domain.annotation_errors import Problem, invalid_value, problem
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import (
    GPU,
    GPUPool,
    GPUResourceQuota,
    KubeObject,
    ModelError,
    WorkloadProfile,
    load_as,
)
from tensorfusion.domain.model.errors import FieldIssue, describe_value
from tensorfusion.domain.object_views import annotations_of, name_of

__all__ = ["load_facts", "read_object", "read_profile_object"]

ObjectT = TypeVar("ObjectT", bound=KubeObject)

# The annotation that brought each kind into admission (ranks its problems in the §5 order).
_ABOUT: Final = {"WorkloadProfile": "workload-profile", "GPUPool": "gpupool"}
# Profile fields kept verbatim (free-form parts, as the API server keeps them).
_VERBATIM: Final = frozenset({"nodeAffinity", "workerPodTemplate"})
_BOOLEANS: Final = ("isLocalGPU", "sidecarWorker")


def _value_text(text: str) -> str:
    """A model error's value (compact JSON) as the text to quote: a string loses its quotes."""
    if text.startswith('"'):
        try:
            decoded = json.loads(text)
        except ValueError:  # shortened by describe_value
            return text[1:]
        return decoded if isinstance(decoded, str) else text
    return text


def _field_problem(where: str, issue: FieldIssue, about: str) -> Problem:
    """`<where> <path>: invalid value "<value>": <rule>` (objects and lists unquoted)."""
    field = f"{where} {issue.path}" if issue.path else where
    if issue.value is None:
        return problem(f"{field}: {issue.message}", about=about)
    if issue.value.startswith(("{", "[")):
        return problem(f"{field}: invalid value {issue.value}: {issue.message}", about=about)
    return invalid_value(field, _value_text(issue.value), issue.message, rank_as=about)


def _subject(kind: str, raw: Mapping[str, Any]) -> tuple[str, str]:
    name = name_of(raw)
    return name, f'{kind} "{name}"' if name else f"{kind} <unnamed>"


def _invalid(kind: str, raw: Mapping[str, Any], issues: Iterable[FieldIssue]) -> InvalidObject:
    name, where = _subject(kind, raw)
    about = _ABOUT.get(kind, "")
    problems = tuple(_field_problem(where, issue, about) for issue in issues)
    default_pool = kind == "GPUPool" and annotations_of(raw).get(KEYS.is_default_pool) == "true"
    status = raw.get("status")
    model = status.get("gpuModel") if isinstance(status, Mapping) else None
    return InvalidObject(
        kind,
        name,
        problems,
        default_pool=default_pool,
        gpu_model=model if kind == "GPU" and isinstance(model, str) else None,
    )


def read_object(model: type[ObjectT], raw: Mapping[str, Any]) -> ObjectT | InvalidObject:
    """The typed object, or an `InvalidObject` naming each bad field; never raises."""
    kind = str(model.model_fields["kind"].default)
    try:
        return load_as(model, raw)
    except ModelError as error:
        return _invalid(kind, raw, error.issues)


def _without_nulls(value: Any) -> Any:
    """Null fields dropped, as the API server prunes them (no field of ours is nullable)."""
    if isinstance(value, Mapping):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value


def _own_count(value: Any, where: str) -> tuple[int | None, list[FieldIssue]]:
    if value is None:
        return None, []
    if isinstance(value, bool) or not isinstance(value, int):
        return None, [FieldIssue(f"{where}.gpuCount", "must be an integer", describe_value(value))]
    return value, []


def _own_indices(value: Any, where: str) -> tuple[list[int], list[FieldIssue]]:
    if value is None:
        return [], []
    if not isinstance(value, list) or any(
        isinstance(item, bool) or not isinstance(item, int) or item < 0 for item in value
    ):
        rule = "must be a list of integers >= 0"
        return [], [FieldIssue(f"{where}.gpuIndices", rule, describe_value(value))]
    return list(value), []


def read_profile_object(raw: Mapping[str, Any]) -> WorkloadProfile | InvalidObject:
    """A WorkloadProfile for admission, or an `InvalidObject`; never raises.

    Admission reads `gpuCount` and `gpuIndices` by its own rules, as before the typed model:
    the final GPU count is checked 1..128 wherever it came from (admission.md §9.3), so a
    profile count an annotation overrides is not an error, and the CRD allows repeated indices.
    The typed spec may therefore hold a count outside 1..128. `isLocalGPU` and
    `sidecarWorker` must be JSON booleans, as the CRD says (the model would read `"true"`).
    Null fields read as absent.
    """
    spec_value = raw.get("spec")
    if not isinstance(spec_value, Mapping):
        return read_object(WorkloadProfile, raw)
    spec = {
        key: value if key in _VERBATIM else _without_nulls(value)
        for key, value in spec_value.items()
        if value is not None
    }
    count, issues = _own_count(spec.pop("gpuCount", None), "spec")
    indices, found = _own_indices(spec.pop("gpuIndices", None), "spec")
    issues += found
    issues += [
        FieldIssue(f"spec.{key}", "must be a boolean (true or false)", describe_value(spec[key]))
        for key in _BOOLEANS
        if key in spec and not isinstance(spec[key], bool)
    ]
    try:
        profile = load_as(WorkloadProfile, {**raw, "spec": spec})
    except ModelError as error:
        issues = [*error.issues, *issues]
        return _invalid("WorkloadProfile", raw, issues)
    if issues:
        return _invalid("WorkloadProfile", raw, issues)
    typed_spec = profile.spec.model_copy(update={"gpu_count": count, "gpu_indices": indices})
    return profile.model_copy(update={"spec": typed_spec})


def load_facts(
    *,
    namespace: str,
    pod_index: int,
    pools: Mapping[str, Mapping[str, Any] | GPUPool] | None = None,
    profile: Mapping[str, Any] | None = None,
    quota: Mapping[str, Any] | None = None,
    gpus: Iterable[Mapping[str, Any]] = (),
    auto_migration: Any = None,
    **other: Any,
) -> AdmissionFacts:
    """`AdmissionFacts` from raw objects (pools keyed by name, raw or already read) and
    `autoMigration` (raw, or
    already read by `read_auto_migration`).

    `other` are the remaining `AdmissionFacts` fields, passed as they are. An object that does
    not load goes to `invalid_objects` (never raises): a referenced profile or the chosen pool
    then denies the pod with 400 naming each bad field, an invalid quota is not enforced and
    an invalid GPU is skipped, each with a warning.
    """
    invalid: list[InvalidObject] = list(other.pop("invalid_objects", ()))
    typed_pools: dict[str, GPUPool] = {}
    for name, raw_pool in (pools or {}).items():
        pool = raw_pool if isinstance(raw_pool, GPUPool) else read_object(GPUPool, raw_pool)
        if isinstance(pool, InvalidObject):
            invalid.append(InvalidObject("GPUPool", name, pool.problems, pool.default_pool))
        else:
            typed_pools[name] = pool
    typed_profile = None if profile is None else read_profile_object(profile)
    typed_quota = None if quota is None else read_object(GPUResourceQuota, quota)
    typed_gpus: list[GPU] = []
    for raw_gpu in gpus:
        gpu = read_object(GPU, raw_gpu)
        if isinstance(gpu, InvalidObject):
            invalid.append(gpu)
        else:
            typed_gpus.append(gpu)
    for item in (typed_profile, typed_quota):
        if isinstance(item, InvalidObject):
            invalid.append(item)
    return AdmissionFacts(
        namespace=namespace,
        pod_index=pod_index,
        pools=typed_pools,
        profile=typed_profile if isinstance(typed_profile, WorkloadProfile) else None,
        quota=typed_quota if isinstance(typed_quota, GPUResourceQuota) else None,
        gpus=tuple(typed_gpus),
        auto_migration=(
            auto_migration
            if isinstance(auto_migration, AutoMigrationConfig)
            else read_auto_migration(auto_migration)
        ),
        invalid_objects=tuple(invalid),
        **other,
    )
