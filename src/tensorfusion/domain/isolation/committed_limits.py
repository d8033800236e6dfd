"""A worker's limits as the leader committed them (hypervisor.md, *GPU isolation*): the pod's
entry in its GPUs' `status.runningApps[].pods[]`, which only the leader's status write-back
writes. A pod's own annotations can change after admission (the webhook does not see updates),
so the node agent enforces what was committed, never what the pod says now. What the pod's
annotations say (`annotated_limits`) is only a fallback: for an entry written before it carried
the isolation mode, and for the metrics of a worker allocated before the agent started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.committed_allocation import running_pod_entries
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["CommittedLimits", "annotated_limits", "committed_limits", "isolation_or"]


@dataclass(frozen=True, slots=True)
class CommittedLimits:
    """The isolation mode, per-GPU limit and GPU capacities (TFLOPS in milli, in the order of
    the worker's GPUs; 0 when unknown) a worker's allocation was committed with."""

    isolation: IsolationMode
    limit: ResourceAmount
    capacities_tflops_milli: tuple[int, ...]


def isolation_or(value: object, default: IsolationMode) -> IsolationMode:
    """`value` as an isolation mode; `default` when absent or not one."""
    try:
        return IsolationMode(str(value)) if value else default
    except ValueError:
        return default


def annotated_limits(annotations: Mapping[str, Any]) -> tuple[IsolationMode, ResourceAmount]:
    """The isolation mode (`soft` unless valid) and per-GPU limit (bad values 0) a pod's
    annotations say."""
    limit = ResourceAmount.from_json({"tflops": annotations.get(KEYS.tflops_limit),
                                      "compute": annotations.get(KEYS.compute_percent_limit),
                                      "vram": annotations.get(KEYS.vram_limit)})  # fmt: skip
    return isolation_or(annotations.get(KEYS.isolation), IsolationMode.SOFT), limit


def _capacity(gpu: Mapping[str, Any] | None) -> int:
    status = gpu.get("status") if gpu else None
    capacity = status.get("capacity") if isinstance(status, Mapping) else None
    return ResourceAmount.from_json(capacity).tflops_milli


def committed_limits(
    uid: str,
    gpus: Sequence[str],
    gpu_objects: Mapping[str, Mapping[str, Any]],
    fallback: IsolationMode,
) -> CommittedLimits:
    """The limits of pod `uid` on `gpus` from the first GPU that lists it; `fallback` is the
    isolation mode when the entry has none (written by a leader older than this field)."""
    entries = (e for name in gpus for e in running_pod_entries(gpu_objects.get(name) or {}))
    entry = next((e for e in entries if e.get("uid") == uid), {})
    isolation = isolation_or(entry.get("isolation"), fallback)
    limit = ResourceAmount.from_json(entry.get("limits"))
    capacities = tuple(_capacity(gpu_objects.get(name)) for name in gpus)
    return CommittedLimits(isolation, limit, capacities)
