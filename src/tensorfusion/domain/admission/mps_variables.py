"""What admission checks for NVIDIA MPS (admission.md, *GPU isolation*).

A worker's containers must not set MPS variables themselves: on a node whose MPS daemon enforces
limits, the node agent gives each worker container the `CUDA_MPS_*` variables of its committed
limits, and a container's own value could raise them (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) or
point it at another daemon (`CUDA_MPS_PIPE_DIRECTORY`). And MPS serves one user at a time on a
node: containers of one worker that run as different users would wait on each other, so that
gets a warning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.annotation_errors import Problem, problem

__all__ = ["MPS_ENV_PREFIX", "mps_user_warnings", "mps_variable_problems"]

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


def _uid(context: object) -> int | None:
    value = context.get("runAsUser") if isinstance(context, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mps_user_warnings(pod: Mapping[str, Any]) -> list[str]:
    """A warning when the pod's containers run as more than one user (`runAsUser` of the
    container, else of the pod)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    default = _uid(spec.get("securityContext"))
    containers = spec.get("containers")
    users = set()
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, Mapping):
            own = _uid(container.get("securityContext"))
            users.add(default if own is None else own)
    if len(users) < 2:
        return []
    shown = ", ".join(sorted("image default" if u is None else str(u) for u in users))
    return [f"containers run as different users ({shown}): NVIDIA MPS serves one user at a "
            "time on a node, so on an MPS-isolated GPU they would wait on each other"]  # fmt: skip
