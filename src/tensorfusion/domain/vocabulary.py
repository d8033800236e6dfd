"""Enumerations of the public contract (api.md §1.1, scheduling.md §7) shared by every layer."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "GPUPhase",
    "IsolationMode",
    "IsolationPolicy",
    "PlacementMode",
    "QoSLevel",
    "TopologyMode",
    "TopologySource",
    "UnknownTopologyPolicy",
]


class QoSLevel(StrEnum):
    """Quality-of-service class of a workload."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class IsolationMode(StrEnum):
    """How a GPU is shared between the pods placed on it."""

    SHARED = "shared"
    SOFT = "soft"
    HARD = "hard"
    PARTITIONED = "partitioned"


class IsolationPolicy(StrEnum):
    """Whether a GPU's isolation mode is fixed by its node (Static) or locked per use (Dynamic)."""

    STATIC = "Static"
    DYNAMIC = "Dynamic"


class PlacementMode(StrEnum):
    """How the allocator ranks nodes and GPUs."""

    COMPACT_FIRST = "CompactFirst"
    LOW_LOAD_FIRST = "LowLoadFirst"
    NODE_COMPACT_GPU_LOW_LOAD = "NodeCompactGPULowLoad"
    FRAGMENTATION_AWARE = "FragmentationAware"
    """Ours: least increase of expected fragmentation against the learned request mix."""


class GPUPhase(StrEnum):
    """Lifecycle phase of a GPU object; only Running GPUs are schedulable."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    DESTROYING = "Destroying"
    MIGRATING = "Migrating"


class TopologyMode(StrEnum):
    """Whether an unsatisfied GPU topology rejects a node (hard) or only ranks it (soft)."""

    SOFT = "soft"
    HARD = "hard"


class TopologySource(StrEnum):
    """Where GPU interconnect topology is read from."""

    AUTO = "auto"
    NUMA = "numa"
    VENDOR = "vendor"


class UnknownTopologyPolicy(StrEnum):
    """What to do with a node whose GPU topology is unknown."""

    TREAT_AS_WORST = "treat-as-worst"
    REJECT = "reject"
