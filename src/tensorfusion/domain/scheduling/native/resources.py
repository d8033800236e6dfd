"""Resource amounts of pods and nodes as kube-scheduler counts them, in integer units.

CPU is in millicores, every other resource in whole units (bytes for memory, storage and
hugepages). Pod requests follow kube-scheduler: the sum of the containers and restartable init
containers, at least every init container (with the sidecars started before it), pod-level
`spec.resources` for cpu and memory when set, plus `spec.overhead`. Missing requests default to
the limits, as the API server does when it admits a pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from types import MappingProxyType
from typing import Any, Final

from tensorfusion.domain.quantities import QuantityError, parse_quantity

__all__ = [
    "CPU",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "NativeInputError",
    "NodeUsage",
    "PodResources",
    "ResourceAmounts",
    "is_extended_resource_name",
    "is_scalar_resource_name",
    "parse_resource_list",
    "pod_resources",
    "resource_amounts",
]

CPU: Final = "cpu"
MEMORY: Final = "memory"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
PODS: Final = "pods"

DEFAULT_MILLI_CPU_REQUEST: Final = 100
"""CPU (milli) counted for a container without a cpu request when scoring."""
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
"""Memory (bytes) counted for a container without a memory request when scoring."""

_POD_LEVEL_RESOURCES: Final = (CPU, MEMORY)
_NON_ZERO_DEFAULTS: Final[Mapping[str, Decimal]] = MappingProxyType(
    {CPU: Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000, MEMORY: Decimal(DEFAULT_MEMORY_REQUEST)}
)
_EMPTY: Final[Mapping[str, int]] = MappingProxyType({})
_QUALIFIED_NAME: Final = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


class NativeInputError(ValueError):
    """A Pod or Node object that kube-scheduler could not read (bad quantity, bad shape)."""


def is_extended_resource_name(name: str) -> bool:
    """True for an extended resource (`vendor.example/thing`, outside `kubernetes.io/`)."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    qualified = f"requests.{name}"
    prefix, _, short = qualified.partition("/")
    fits = len(prefix) <= 253 and len(short) <= 63
    return fits and _QUALIFIED_NAME.fullmatch(qualified) is not None


def is_scalar_resource_name(name: str) -> bool:
    """True for the resources kube-scheduler keeps beside cpu, memory and storage."""
    return (
        is_extended_resource_name(name)
        or name.startswith(("hugepages-", "attachable-volumes-"))
        or "kubernetes.io/" in name
    )


@dataclass(frozen=True, slots=True)
class ResourceAmounts:
    """CPU (milli), memory and ephemeral storage (bytes) and scalar resources (units)."""

    cpu_milli: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    scalar: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    def is_zero(self) -> bool:
        """True when nothing is requested."""
        return not (
            self.cpu_milli or self.memory or self.ephemeral_storage or any(self.scalar.values())
        )

    def get(self, name: str) -> int:
        """The amount of one resource by its Kubernetes name (0 when absent)."""
        if name == CPU:
            return self.cpu_milli
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        return self.scalar.get(name, 0)


@dataclass(frozen=True, slots=True)
class PodResources:
    """A pod's requests for the filter and its non-zero cpu and memory for scoring."""

    requests: ResourceAmounts = field(default_factory=ResourceAmounts)
    non_zero_cpu_milli: int = DEFAULT_MILLI_CPU_REQUEST
    non_zero_memory: int = DEFAULT_MEMORY_REQUEST

    def scoring_request(self, name: str) -> int:
        """The request that NodeResourcesFit scoring counts for one resource."""
        if name == CPU:
            return self.non_zero_cpu_milli
        if name == MEMORY:
            return self.non_zero_memory
        return self.requests.get(name)


class NodeUsage:
    """What the pods bound to a node request; the caller adds and removes pods as they bind."""

    __slots__ = (
        "cpu_milli",
        "ephemeral_storage",
        "memory",
        "non_zero_cpu_milli",
        "non_zero_memory",
        "pods",
        "scalar",
    )

    def __init__(self) -> None:
        self.cpu_milli = 0
        self.memory = 0
        self.ephemeral_storage = 0
        self.pods = 0
        self.scalar: dict[str, int] = {}
        self.non_zero_cpu_milli = 0
        self.non_zero_memory = 0

    @classmethod
    def of(cls, pods: Iterable[PodResources]) -> NodeUsage:
        """The usage of a node holding the given pods."""
        usage = cls()
        for pod in pods:
            usage.add(pod)
        return usage

    def add(self, pod: PodResources) -> None:
        """Count a pod bound to the node."""
        self._apply(pod, 1)

    def remove(self, pod: PodResources) -> None:
        """Forget a pod that left the node (the same PodResources that was added)."""
        self._apply(pod, -1)

    def requested(self, name: str) -> int:
        """Requested amount of one resource (cpu in milli)."""
        if name == CPU:
            return self.cpu_milli
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.pods
        return self.scalar.get(name, 0)

    def copy(self) -> NodeUsage:
        """An independent copy."""
        other = NodeUsage()
        other.cpu_milli = self.cpu_milli
        other.memory = self.memory
        other.ephemeral_storage = self.ephemeral_storage
        other.pods = self.pods
        other.scalar = dict(self.scalar)
        other.non_zero_cpu_milli = self.non_zero_cpu_milli
        other.non_zero_memory = self.non_zero_memory
        return other

    def __repr__(self) -> str:
        return (
            f"NodeUsage(cpu_milli={self.cpu_milli}, memory={self.memory}, "
            f"ephemeral_storage={self.ephemeral_storage}, pods={self.pods}, scalar={self.scalar}, "
            f"non_zero_cpu_milli={self.non_zero_cpu_milli}, non_zero_memory={self.non_zero_memory})"
        )

    def _apply(self, pod: PodResources, sign: int) -> None:
        requests = pod.requests
        self.cpu_milli += sign * requests.cpu_milli
        self.memory += sign * requests.memory
        self.ephemeral_storage += sign * requests.ephemeral_storage
        self.pods += sign
        for name, amount in requests.scalar.items():
            left = self.scalar.get(name, 0) + sign * amount
            if left:
                self.scalar[name] = left
            else:
                self.scalar.pop(name, None)
        self.non_zero_cpu_milli += sign * pod.non_zero_cpu_milli
        self.non_zero_memory += sign * pod.non_zero_memory


def parse_resource_list(value: object, where: str) -> dict[str, Decimal]:
    """Exact values of a ResourceList (`{name: quantity}`); `where` names it in errors."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NativeInputError(f"{where}: expected a map of resource quantities, got {value!r}")
    out: dict[str, Decimal] = {}
    for name, raw in value.items():
        out[str(name)] = _quantity(raw, f"{where}.{name}")
    return out


def resource_amounts(values: Mapping[str, Decimal]) -> ResourceAmounts:
    """Integer amounts of exact values (cpu rounded up to milli, the rest up to units)."""
    scalar = {
        name: _ceil(amount)
        for name, amount in values.items()
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS) and is_scalar_resource_name(name)
    }
    return ResourceAmounts(
        cpu_milli=_ceil(values.get(CPU, Decimal(0)) * 1000),
        memory=_ceil(values.get(MEMORY, Decimal(0))),
        ephemeral_storage=_ceil(values.get(EPHEMERAL_STORAGE, Decimal(0))),
        scalar=MappingProxyType(scalar) if scalar else _EMPTY,
    )


def pod_resources(pod: Mapping[str, Any]) -> PodResources:
    """Requests of a pod (a v1 Pod as a dict) as kube-scheduler computes them."""
    spec = _mapping(pod.get("spec"), "spec")
    containers = [
        _container_requests(c, f"spec.containers[{i}]")
        for i, c in enumerate(_sequence(spec.get("containers"), "spec.containers"))
    ]
    init_containers = [
        (
            _container_requests(c, f"spec.initContainers[{i}]"),
            _mapping(c, f"spec.initContainers[{i}]").get("restartPolicy") == "Always",
        )
        for i, c in enumerate(_sequence(spec.get("initContainers"), "spec.initContainers"))
    ]
    pod_level = _requests_with_limits(spec.get("resources"), "spec.resources")
    pod_level = {k: v for k, v in pod_level.items() if k in _POD_LEVEL_RESOURCES}
    overhead = parse_resource_list(spec.get("overhead"), "spec.overhead")

    requests = _pod_requests(containers, init_containers, pod_level, overhead, {})
    if pod_level:
        defaults = {k: v for k, v in _NON_ZERO_DEFAULTS.items() if k not in requests}
    else:
        defaults = dict(_NON_ZERO_DEFAULTS)
    non_zero = (
        _pod_requests(containers, init_containers, pod_level, overhead, defaults)
        if defaults
        else requests
    )
    return PodResources(
        requests=resource_amounts(requests),
        non_zero_cpu_milli=_ceil(non_zero.get(CPU, Decimal(0)) * 1000),
        non_zero_memory=_ceil(non_zero.get(MEMORY, Decimal(0))),
    )


def _pod_requests(
    containers: list[dict[str, Decimal]],
    init_containers: list[tuple[dict[str, Decimal], bool]],
    pod_level: Mapping[str, Decimal],
    overhead: Mapping[str, Decimal],
    defaults: Mapping[str, Decimal],
) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for requests in containers:
        _add(total, _with_defaults(requests, defaults))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for requests, restartable in init_containers:
        own = _with_defaults(requests, defaults)
        if restartable:
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    total.update(pod_level)
    _add(total, overhead)
    return total


def _container_requests(container: object, where: str) -> dict[str, Decimal]:
    return _requests_with_limits(_mapping(container, where).get("resources"), f"{where}.resources")


def _requests_with_limits(resources: object, where: str) -> dict[str, Decimal]:
    body = _mapping(resources, where)
    requests = parse_resource_list(body.get("requests"), f"{where}.requests")
    for name, limit in parse_resource_list(body.get("limits"), f"{where}.limits").items():
        requests.setdefault(name, limit)
    return requests


def _with_defaults(
    requests: dict[str, Decimal], defaults: Mapping[str, Decimal]
) -> dict[str, Decimal]:
    if not defaults or all(name in requests for name in defaults):
        return requests
    out = dict(requests)
    for name, amount in defaults.items():
        out.setdefault(name, amount)
    return out


def _add(into: dict[str, Decimal], values: Mapping[str, Decimal]) -> None:
    for name, amount in values.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: dict[str, Decimal], values: Mapping[str, Decimal]) -> None:
    for name, amount in values.items():
        current = into.get(name)
        if current is None or amount > current:
            into[name] = amount


def _quantity(raw: object, where: str) -> Decimal:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise NativeInputError(f"{where}: not a quantity: {raw!r}")
    text = raw if isinstance(raw, str) else repr(raw)
    try:
        return parse_quantity(text).value
    except QuantityError as error:
        raise NativeInputError(f"{where}: not a quantity: {raw!r}") from error


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise NativeInputError(f"{where}: expected an object, got {value!r}")
    return value


def _sequence(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise NativeInputError(f"{where}: expected a list, got {value!r}")
    return list(value)
