"""A worker's containers must not set NVIDIA MPS variables themselves (admission.md, *GPU
isolation*): on a node whose MPS daemon enforces limits, the node agent gives each worker
container the `CUDA_MPS_*` variables of its committed limits, and a container's own value could
raise them (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) or point it at another daemon
(`CUDA_MPS_PIPE_DIRECTORY`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.annotation_errors import Problem, problem

__all__ = ["MPS_ENV_PREFIX", "mps_variable_problems"]

MPS_ENV_PREFIX: Final = "CUDA_MPS_"


def mps_variable_problems(pod: Mapping[str, Any]) -> list[Problem]:
    """One problem per container (init containers included) that sets a `CUDA_MPS_*`
    variable in `env`."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    found: list[Problem] = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, Mapping):
                continue
            env = container.get("env")
            names = sorted({str(item.get("name")) for item in env if isinstance(item, Mapping)
                            and str(item.get("name", "")).startswith(MPS_ENV_PREFIX)}
                           if isinstance(env, list) else ())  # fmt: skip
            if names:
                found.append(problem(
                    f"container {container.get('name')!r} sets {', '.join(names)}: the node "
                    "agent sets the NVIDIA MPS variables that enforce the worker's limits; "
                    "remove them", about="isolation",
                ))  # fmt: skip
    return found
