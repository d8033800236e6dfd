"""Which containers of a TF pod get GPUs (admission.md §4 step 10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.annotation_errors import Problem, problem
from tensorfusion.domain.annotations import Keys

__all__ = ["container_names", "resolve_injected_containers"]


def container_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of `spec.containers`, in order."""
    return tuple(
        str(container.get("name", ""))
        for container in (pod.get("spec") or {}).get("containers") or ()
    )


def resolve_injected_containers(
    annotated: tuple[str, ...] | None,
    names: tuple[str, ...],
    native_holders: tuple[str, ...],
    keys: Keys,
) -> tuple[tuple[str, ...], list[Problem]]:
    """`inject-container` list; else the only container; else the native-GPU containers."""
    if annotated is not None:
        return annotated, []
    if len(names) == 1:
        return names, []
    if native_holders:
        return native_holders, []
    return (), [
        problem(
            f"{keys.inject_container}: required when the pod has more than one container "
            f"({', '.join(names)})",
            about="inject-container",
        )
    ]
