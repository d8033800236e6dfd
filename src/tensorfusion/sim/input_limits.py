"""Bounds on what the simulator reads: file sizes per kind, and the size of a trace and cluster.

The trace is bounded in total (not streamed): the report keeps one result per pod, so a
streamed trace would still grow with the pods; the totals are checked on the parsed file before
any pod, node or name list is built. The limits are listed in docs/simulator.md.
"""

from __future__ import annotations

from typing import Final

from tensorfusion.domain.bounded_documents import KUBERNETES_OBJECT_BYTES, DocumentLimits

__all__ = [
    "CLUSTER_FILE_LIMITS",
    "MAX_CLUSTER_GPUS",
    "MAX_CLUSTER_NODES",
    "MAX_OPENB_FILE_BYTES",
    "MAX_OPENB_NODES",
    "MAX_TRACE_PODS",
    "MAX_USAGE_FRACTION",
    "MAX_USAGE_POINTS",
    "POD_MANIFEST_LIMITS",
    "WORKLOAD_FILE_LIMITS",
    "too_many",
]

MiB: Final = 1024 * 1024

POD_MANIFEST_LIMITS: Final = DocumentLimits(max_bytes=KUBERNETES_OBJECT_BYTES)
"""A pod manifest (`simulate-schedule`): one Kubernetes object, as the API server bounds it."""

CLUSTER_FILE_LIMITS: Final = DocumentLimits(max_bytes=8 * MiB)
"""A cluster file: many nodes, each a few hundred bytes (the openb cluster is about 300 KB)."""

WORKLOAD_FILE_LIMITS: Final = DocumentLimits(max_bytes=8 * MiB)
"""A workload file: many entries, each with a pod manifest."""

MAX_TRACE_PODS: Final = 200_000
"""Pods of one trace in total (replicas summed over the entries, or openb tasks drawn).
The openb inflation at 1.3 is 10,813 pods, at the largest factor (10) about 83,000."""

MAX_USAGE_POINTS: Final = 1_000
"""Points of one usage profile (per entry and resource): a day at one point every 90 s."""

MAX_USAGE_FRACTION: Final = 10.0
"""The largest fraction of its request a usage profile may give: above 1 a pod uses more than
it asked (up to its limit); ten times is as far as a limit-to-request ratio usefully goes."""

MAX_CLUSTER_NODES: Final = 10_000
"""Nodes of one cluster in total (replicas summed); the openb cluster has 1,213."""

MAX_CLUSTER_GPUS: Final = 80_000
"""GPUs of one cluster in total; the openb cluster has 6,212."""

MAX_OPENB_FILE_BYTES: Final = 64 * MiB
"""One openb CSV file; the published task lists weigh under 1 MB."""

MAX_OPENB_NODES: Final = MAX_CLUSTER_NODES
"""Rows of an openb node list (each row is a node)."""


def too_many(total: int, what: str, limit: int) -> str:
    """The one message of a total over its limit."""
    return f"{total:,} {what} in total: the limit is {limit:,} {what}"
