"""Admission facts from raw API objects, and the denial for an object that does not load.

The shell keeps typed objects (its informer cache loads each one with `load_as`); tests and
tools that hold raw JSON use `load_facts`. An object that does not match the model raises
`ModelError` naming the kind, the object, the field, the value and what is allowed;
`invalid_object_error` turns it into the 400 denial of the pod that needed the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from tensorfusion.domain.admission.auto_migration import read_auto_migration
from tensorfusion.domain.admission.facts import AdmissionFacts
from tensorfusion.domain.annotation_errors import AnnotationError, problem
from tensorfusion.domain.model import (
    GPU,
    GPUPool,
    GPUResourceQuota,
    ModelError,
    WorkloadProfile,
    load_as,
)

__all__ = ["invalid_object_error", "load_facts"]

# The annotation that brought each kind into admission (ranks the problem in the §5 order).
_ABOUT: Final = {"WorkloadProfile": "workload-profile", "GPUPool": "gpupool"}


def load_facts(
    *,
    namespace: str,
    pod_index: int,
    pools: Mapping[str, Mapping[str, Any]] | None = None,
    profile: Mapping[str, Any] | None = None,
    quota: Mapping[str, Any] | None = None,
    gpus: Iterable[Mapping[str, Any]] = (),
    auto_migration: Any = None,
    **other: Any,
) -> AdmissionFacts:
    """`AdmissionFacts` from raw objects (pools keyed by name) and the raw `autoMigration`.

    `other` are the remaining `AdmissionFacts` fields, passed as they are. Raises `ModelError`
    for an object that does not load.
    """
    return AdmissionFacts(
        namespace=namespace,
        pod_index=pod_index,
        pools={name: load_as(GPUPool, pool) for name, pool in (pools or {}).items()},
        profile=None if profile is None else load_as(WorkloadProfile, profile),
        quota=None if quota is None else load_as(GPUResourceQuota, quota),
        gpus=tuple(load_as(GPU, gpu) for gpu in gpus),
        auto_migration=read_auto_migration(auto_migration),
        **other,
    )


def invalid_object_error(error: ModelError) -> AnnotationError:
    """A 400 naming the object and each bad field, for a pod whose pool or profile is invalid."""
    about = _ABOUT.get(error.kind or "", "")
    return AnnotationError(
        problem(f"{error.subject}: {issue}", about=about) for issue in error.issues
    )
