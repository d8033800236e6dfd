"""Classification of incoming pods (admission.md §3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tensorfusion.domain.admission.auto_migration import (
    AutoMigrationConfig,
    auto_migration_selects,
)
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.native_resources import has_native_gpus
from tensorfusion.domain.object_views import labels_of

__all__ = ["Classification", "Route", "classify", "with_progressive_scheduler"]

_DEFAULT_SCHEDULER = "default-scheduler"


class Route(StrEnum):
    """What admission does with a pod."""

    TF = "tf"  # labelled enabled: TF pipeline
    MIGRATE = "migrate"  # auto-migrated native pod: label, isolation shared, TF pipeline
    PROGRESSIVE = "progressive"  # native pod under progressive migration: scheduler patch only
    UNTOUCHED = "untouched"


@dataclass(frozen=True, slots=True)
class Classification:
    """The route, whether the pod has native GPUs, and warnings of auto-migration rules."""

    route: Route
    has_native_gpus: bool = False
    warnings: tuple[str, ...] = ()


def classify(
    pod: Mapping[str, Any],
    *,
    namespace: str,
    native_resources: Mapping[str, str],
    auto_migration: AutoMigrationConfig,
    namespace_labels: Mapping[str, str] | None,
    progressive_migration: bool,
    keys: Keys,
) -> Classification:
    """Steps 1-5 of §3."""
    label = labels_of(pod).get(keys.enabled)
    native = has_native_gpus(pod, native_resources)
    if label == "true":
        return Classification(Route.TF, native)
    if not native:
        return Classification(Route.UNTOUCHED)
    warnings: tuple[str, ...] = ()
    if label != "false":
        selected, warnings = auto_migration_selects(
            pod, namespace, auto_migration, namespace_labels
        )
        if selected:
            return Classification(Route.MIGRATE, True, warnings)
    if progressive_migration:
        return Classification(Route.PROGRESSIVE, True, warnings)
    return Classification(Route.UNTOUCHED, True, warnings)


def with_progressive_scheduler(
    pod: Mapping[str, Any], keys: Keys
) -> tuple[dict[str, Any] | None, str | None]:
    """The pod with `schedulerName` set to ours when it is empty or the default one.

    Returns (new pod, None), or (None, warning) when a custom scheduler is left alone, or
    (None, None) when the pod already uses ours.
    """
    current = (pod.get("spec") or {}).get("schedulerName") or ""
    if current == keys.scheduler_name:
        return None, None
    if current not in ("", _DEFAULT_SCHEDULER):
        return None, (
            f'schedulerName "{current}" left alone: progressive migration only replaces '
            f"{_DEFAULT_SCHEDULER}, so this pod may share GPUs with TensorFusion pods"
        )
    spec = dict(pod.get("spec") or {})
    spec["schedulerName"] = keys.scheduler_name
    out = dict(pod)
    out["spec"] = spec
    return out, None
