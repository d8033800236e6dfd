"""Isolation, local or remote GPU and the sidecar worker of a TF pod (admission.md §4 step 6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tensorfusion.domain.admission.profile import ProfileSpec
from tensorfusion.domain.admission.validation import REMOTE_RULE, ParsedAnnotations
from tensorfusion.domain.annotation_errors import Problem, invalid_value
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.model import GPUPool
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["PARTITIONED_RULE", "ExecutionMode", "resolve_execution_mode"]

PARTITIONED_RULE: Final = "partitioned isolation is not supported by this version"


@dataclass(frozen=True, slots=True)
class ExecutionMode:
    """How the pod runs: isolation mode, local GPU, sidecar worker, partition template."""

    isolation: IsolationMode = IsolationMode.SOFT
    is_local_gpu: bool = True
    sidecar_worker: bool = False
    partition_template_id: str | None = None


def resolve_execution_mode(
    parsed: ParsedAnnotations,
    profile: ProfileSpec,
    pool_name: str,
    pool: GPUPool | None,
    keys: Keys,
) -> tuple[ExecutionMode, list[Problem]]:
    """Resolve the mode; remote vGPU and partitioned isolation are denied in this version."""
    problems: list[Problem] = []
    isolation = parsed.isolation or profile.isolation or IsolationMode.SOFT
    sidecar = parsed.sidecar_worker
    if sidecar is None:
        sidecar = bool(profile.sidecar_worker)
    if sidecar:
        local = True
    elif parsed.is_local_gpu is not None:
        local = parsed.is_local_gpu
        if not local:
            problems.append(invalid_value(keys.is_local_gpu, "false", REMOTE_RULE))
    elif profile.is_local_gpu:
        local = True
    else:
        local = pool is None or pool.spec.default_using_local_gpu is not False
        if not local:
            problems.append(
                invalid_value(
                    f'GPUPool "{pool_name}" spec.defaultUsingLocalGPU',
                    "false",
                    REMOTE_RULE,
                    rank_as="is-local-gpu",
                )
            )
    if isolation is IsolationMode.HARD and local:
        sidecar = True
    partition = None
    if isolation is IsolationMode.PARTITIONED:
        partition = parsed.partition_id or profile.partition_template_id
        problems.append(invalid_value(keys.isolation, isolation.value, PARTITIONED_RULE))
    elif parsed.partition_id is not None:
        problems.append(
            invalid_value(
                keys.partition_id,
                parsed.partition_id,
                f"only allowed with {keys.isolation}=partitioned",
            )
        )
    return ExecutionMode(isolation, local, sidecar, partition), problems
