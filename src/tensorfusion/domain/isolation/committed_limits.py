"""A worker's limits as the leader committed them (hypervisor.md, *GPU isolation*): the pod's
entry in its GPUs' `status.runningApps[].pods[]`, which only the leader's status write-back
writes. A pod's own annotations can change after admission (the webhook does not see updates),
so the node agent enforces what was committed, never what the pod says now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["CommittedLimits", "committed_limits"]


@dataclass(frozen=True, slots=True)
class CommittedLimits:
    """The isolation mode, per-GPU limit and GPU capacities (TFLOPS in milli, in the order of
    the worker's GPUs; 0 when unknown) a worker's allocation was committed with."""

    isolation: IsolationMode
    limit: ResourceAmount
    capacities_tflops_milli: tuple[int, ...]


def _entry(uid: str, gpu: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = gpu.get("status")
    apps = status.get("runningApps") if isinstance(status, Mapping) else None
    for app in apps if isinstance(apps, list) else ():
        pods = app.get("pods") if isinstance(app, Mapping) else None
        for pod in pods if isinstance(pods, list) else ():
            if isinstance(pod, Mapping) and pod.get("uid") == uid:
                return pod
    return None


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
    entry: Mapping[str, Any] = {}
    for name in gpus:
        found = _entry(uid, gpu_objects.get(name) or {})
        if found is not None:
            entry = found
            break
    try:
        isolation = IsolationMode(str(entry.get("isolation")))
    except ValueError:
        isolation = fallback
    limit = ResourceAmount.from_json(entry.get("limits"))
    capacities = tuple(_capacity(gpu_objects.get(name)) for name in gpus)
    return CommittedLimits(isolation, limit, capacities)
