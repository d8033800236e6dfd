"""Scheduling: the native kube-scheduler subset, the scheduler configuration and the GPU
plugins (filter stages in `gpu_filters`, placement modes in `placement_modes`).

The placement modes are registered here, one entry each.
"""

from tensorfusion.domain.scheduling.fragmentation_choice import FRAGMENTATION_AWARE
from tensorfusion.domain.scheduling.placement_modes import (
    SCORE_ORDERS,
    PlacementModePlugin,
    register,
)

_BUILT_IN: tuple[PlacementModePlugin, ...] = (*SCORE_ORDERS, FRAGMENTATION_AWARE)
for _mode in _BUILT_IN:
    register(_mode)
