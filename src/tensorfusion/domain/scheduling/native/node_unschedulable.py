"""NodeUnschedulable: a cordoned node takes only pods tolerating its unschedulable taint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from tensorfusion.domain.scheduling.native.node import NO_SCHEDULE, Taint
from tensorfusion.domain.scheduling.native.taint_toleration import Toleration, tolerated

__all__ = [
    "NODE_UNSCHEDULABLE",
    "NODE_UNSCHEDULABLE_REASON",
    "UNSCHEDULABLE_TAINT",
    "tolerates_unschedulable",
]

NODE_UNSCHEDULABLE: Final = "NodeUnschedulable"
NODE_UNSCHEDULABLE_REASON: Final = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT: Final = Taint(key="node.kubernetes.io/unschedulable", effect=NO_SCHEDULE)


def tolerates_unschedulable(tolerations: Sequence[Toleration]) -> bool:
    """Whether the tolerations cover `node.kubernetes.io/unschedulable:NoSchedule`."""
    return tolerated(tolerations, UNSCHEDULABLE_TAINT)
