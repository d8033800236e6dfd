"""The body of `GET /api/workloads` (docs/api.md): each TensorFusionWorkload with what it was
admitted with, what its workers hold now on their GPUs, what they used lately (from
`tf_worker_usage`, per GPU) and what the autoscaler says of it; the SQL of the usage read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.autoscaling.status_view import scaling_view
from tensorfusion.domain.metrics.conditions import Dialect, wall_conditions
from tensorfusion.domain.metrics.rows import positive_number
from tensorfusion.domain.object_views import name_of, namespace_of
from tensorfusion.domain.quantities import format_bytes, format_milli

__all__ = [
    "USAGE_WINDOW_S",
    "RecentUsage",
    "parse_recent_usage",
    "recent_usage_query",
    "workloads_view",
]  # fmt: skip

USAGE_WINDOW_S: Final = 300
MAX_USAGE_ROWS: Final = 100_000


@dataclass(frozen=True, slots=True)
class RecentUsage:
    """A workload's mean usage per GPU over the window: TFLOPS in milli, VRAM in bytes."""

    tflops_milli: int
    vram_bytes: int
    samples: int


def recent_usage_query(dialect: Dialect, window_s: int = USAGE_WINDOW_S) -> str:
    """Per workload: the mean TFLOPS and bytes of its attributed samples over the window."""
    where = f"usage_known = 1 AND {wall_conditions(dialect, f'{window_s}s', window_s * 1000)}"
    return (
        "SELECT namespace, workload, avg(compute_tflops) AS tflops, avg(memory_bytes) AS vram,"
        f" count(*) AS samples FROM tf_worker_usage WHERE {where}"
        f" GROUP BY namespace, workload LIMIT {MAX_USAGE_ROWS}"
    )


def parse_recent_usage(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], RecentUsage]:
    """The answer of `recent_usage_query` by (namespace, workload); a bad value reads as 0."""
    return {
        (str(row.get("namespace") or ""), str(row.get("workload") or "")): RecentUsage(
            tflops_milli=round(positive_number(row.get("tflops")) * 1000),
            vram_bytes=round(positive_number(row.get("vram"))),
            samples=int(positive_number(row.get("samples"))),
        )
        for row in rows
    }


def _usage_json(usage: RecentUsage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {"tflops": format_milli(usage.tflops_milli), "vram": format_bytes(usage.vram_bytes),
            "samples": usage.samples}  # fmt: skip


def workloads_view(
    workloads: Iterable[Mapping[str, Any]],
    allocator: Allocator | None,
    *,
    usage: Mapping[tuple[str, str], RecentUsage] | None,
    usage_error: str = "",
    namespace: str | None = None,
) -> dict[str, Any]:
    """The body: `{usageWindowSeconds, usageError, workloads: [...]}`, sorted by namespace and
    name. `usage` None: the store could not be read (`usageError` says why)."""
    held: dict[tuple[str, str], list[Any]] = {}
    for record in allocator.records.values() if allocator is not None else ():
        request = record.request
        if request.workload:
            held.setdefault((request.namespace, request.workload), []).append(record)
    items = []
    for workload in workloads:
        key = (namespace_of(workload), name_of(workload))
        if namespace is not None and key[0] != namespace:
            continue
        spec = workload.get("spec") or {}
        resources = spec.get("resources") or {}
        records = sorted(held.get(key, []), key=lambda r: r.request.pod_name)
        current = records[0].request if records else None
        items.append({
            "namespace": key[0], "name": key[1], "pool": spec.get("poolName") or None,
            "phase": (workload.get("status") or {}).get("phase"),
            "admitted": {"requests": ResourceAmount.from_json(resources.get("requests")).to_json(),
                         "limits": ResourceAmount.from_json(resources.get("limits")).to_json()},
            "current": None if current is None else {"requests": current.request.to_json(),
                                                     "limits": current.limit.to_json()},
            "workers": [{"name": r.request.pod_name, "node": r.node, "gpus": list(r.gpus)}
                        for r in records],
            "usage": _usage_json(usage.get(key)) if usage is not None else None,
            "autoScaling": scaling_view(workload),
        })  # fmt: skip
    items.sort(key=lambda item: (item["namespace"], item["name"]))
    return {"usageWindowSeconds": USAGE_WINDOW_S, "usageError": usage_error or None,
            "workloads": items}  # fmt: skip
