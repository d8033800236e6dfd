"""Native GPU resources (`nvidia.com/gpu`, ...) in pods: detection, counting, removal (§3, §9)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.annotation_errors import Problem, invalid_value, problem
from tensorfusion.domain.quantities import Quantity, QuantityError, parse_quantity

__all__ = [
    "DEFAULT_NATIVE_RESOURCES",
    "NativeGPUs",
    "has_native_gpus",
    "inspect_native_gpus",
    "native_injection_problems",
    "strip_native_resources",
]

DEFAULT_NATIVE_RESOURCES: Final[Mapping[str, str]] = {
    "nvidia.com/gpu": "NVIDIA",
    "amd.com/gpu": "AMD",
}
_SIDES: Final = ("requests", "limits")


def _quantity(value: Any) -> Quantity | None:
    try:
        return parse_quantity(str(value))
    except QuantityError:
        return None


def _native_entries(
    container: Mapping[str, Any], native: Mapping[str, str]
) -> Iterator[tuple[str, str, Any]]:
    resources = container.get("resources") or {}
    for side in _SIDES:
        for name, value in (resources.get(side) or {}).items():
            if name in native:
                yield side, name, value


def _all_containers(pod: Mapping[str, Any]) -> Iterator[tuple[bool, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    for container in spec.get("initContainers") or ():
        yield True, container
    for container in spec.get("containers") or ():
        yield False, container


def has_native_gpus(pod: Mapping[str, Any], native: Mapping[str, str]) -> bool:
    """True when any (init) container has a positive native GPU quantity (requests or limits)."""
    for _, container in _all_containers(pod):
        for _, _, value in _native_entries(container, native):
            quantity = _quantity(value)
            if quantity is not None and quantity.value > 0:
                return True
    return False


@dataclass(frozen=True, slots=True)
class NativeGPUs:
    """Native GPUs of a TF pod's regular containers (§9.1)."""

    per_container: tuple[tuple[str, int], ...] = ()
    vendor: str | None = None
    holders: tuple[str, ...] = ()
    init_holders: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()

    @property
    def total(self) -> int:
        """Sum of the whole-number limits."""
        return sum(count for _, count in self.per_container)

    @property
    def containers(self) -> tuple[str, ...]:
        """Containers with a positive native limit (the default inject list)."""
        return tuple(name for name, _ in self.per_container)


def inspect_native_gpus(pod: Mapping[str, Any], native: Mapping[str, str]) -> NativeGPUs:
    """Validate and count the native GPU limits (§9.1) and find every container that holds any."""
    per_container: list[tuple[str, int]] = []
    holders: list[str] = []
    init_holders: list[str] = []
    problems: list[Problem] = []
    vendor: str | None = None
    for is_init, container in _all_containers(pod):
        name = str(container.get("name", ""))
        count = 0
        held = False
        for side, resource, value in _native_entries(container, native):
            quantity = _quantity(value)
            positive = quantity is not None and quantity.value > 0
            held = held or positive
            if is_init or side != "limits":
                continue
            field = f'container "{name}" limits {resource}'
            if quantity is None or quantity.value < 0 or quantity.value % 1 != 0:
                problems.append(invalid_value(field, str(value), "must be a whole number"))
                continue
            if positive:
                count += int(quantity.value)
                vendor = vendor or native[resource]
        if held:
            (init_holders if is_init else holders).append(name)
        if count:
            per_container.append((name, count))
    return NativeGPUs(
        tuple(per_container), vendor, tuple(holders), tuple(init_holders), tuple(problems)
    )


def native_injection_problems(
    native: NativeGPUs, injected: tuple[str, ...], inject_key: str
) -> list[Problem]:
    """§9.4: native GPUs only in injected containers, never in init containers."""
    problems = [
        problem(
            f'container "{name}" holds native GPU resources but is not an injected '
            f"container ({inject_key})",
            about="inject-container",
        )
        for name in native.holders
        if name not in injected
    ]
    problems.extend(
        problem(
            f'init container "{name}" holds native GPU resources, which TensorFusion '
            "cannot provide to init containers",
            about="inject-container",
        )
        for name in native.init_holders
    )
    return problems


def strip_native_resources(pod: MutableMapping[str, Any], native: Mapping[str, str]) -> None:
    """Remove every native GPU name from requests and limits of all containers (§9.5), in place."""
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or ():
            resources = container.get("resources")
            if not resources:
                continue
            for side in _SIDES:
                values = resources.get(side)
                if values:
                    for name in [name for name in values if name in native]:
                        del values[name]
