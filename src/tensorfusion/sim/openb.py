"""The openb trace as the simulator's cluster and workload (`tensor-fusion simulate --openb`).

Nodes: one node per row, its GPUs of the row's model (hardware table `openb_csv.HARDWARE`),
labelled `nvidia.com/gpu.product`, in one pool. Tasks: a share of one GPU is a TensorFusion pod
asking `compute-percent-request` = `gpu_milli` / 10 on one GPU; whole cards are a TensorFusion
pod with `gpu-count` = `num_gpu` at 100 percent each; a task without GPU is a native pod; every
task asks its `cpu_milli` and `memory_mib`, and a `gpu_spec` becomes a required node affinity
on the GPU model label.

Two experiments: the list as recorded (arrival `creation_time`, duration `deletion_time` −
`creation_time`), or workload inflation (`inflate`): tasks drawn with replacement, one a
second, never leaving, until the arrived GPU request reaches `inflate` × the cluster's GPUs;
inflation needs neither time column, so it takes the five-column multi-GPU task lists.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tensorfusion.domain.vocabulary import PlacementMode
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.input_limits import MAX_CLUSTER_GPUS, MAX_TRACE_PODS, too_many
from tensorfusion.sim.openb_csv import HARDWARE, OpenbNode, OpenbTask, read_nodes, read_tasks
from tensorfusion.sim.workload_file import TraceEntry, WorkloadFile

__all__ = [
    "MODEL_LABEL",
    "POOL",
    "OpenbRun",
    "inflated",
    "load_openb",
    "openb_cluster",
    "openb_workload",
]

MODEL_LABEL: Final = "nvidia.com/gpu.product"
POOL: Final = "openb"
NEVER: Final = 10 * 365 * 86400.0
"""The duration of a task that never leaves (ten years, beyond any inflation run)."""
ENABLED: Final = {"tensor-fusion.ai/enabled": "true"}


@dataclass(frozen=True, slots=True)
class OpenbRun:
    """A trace ready to simulate: the cluster, the pods, and each pod's GPU request in order."""

    cluster: ClusterFile
    workload: WorkloadFile
    gpu_requests: tuple[float, ...]
    cluster_gpus: int
    until: float | None


def openb_cluster(nodes: list[OpenbNode]) -> ClusterFile:
    """One pool (the default placement mode unless overridden) holding every node."""
    used = sorted({n.model for n in nodes})
    return ClusterFile.model_validate({
        "hardware": [
            {"model": m, "fp16TFlops": HARDWARE[m].fp16_tflops, "vram": HARDWARE[m].vram}
            for m in used
        ],
        "pools": [{"name": POOL, "isDefault": True,
                   "placementMode": PlacementMode.NODE_COMPACT_GPU_LOW_LOAD.value}],
        "nodes": [
            {"name": n.name, "pool": POOL, "cpu": f"{n.cpu_milli}m",
             "memory": f"{n.memory_mib}Mi", "labels": {MODEL_LABEL: n.model},
             "gpus": {"model": n.model, "count": n.gpus}}
            for n in nodes
        ],
    })  # fmt: skip


def _pod(task: OpenbTask) -> dict[str, Any]:
    container = {
        "name": "task",
        "resources": {"requests": {"cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}},
    }
    pod: dict[str, Any] = {"metadata": {}, "spec": {"containers": [container]}}
    if task.num_gpu:
        percent = f"{task.gpu_milli / 10:g}" if task.sharing else "100"
        pod["metadata"] = {
            "labels": dict(ENABLED),
            "annotations": {
                "tensor-fusion.ai/gpu-count": str(task.num_gpu),
                "tensor-fusion.ai/compute-percent-request": percent,
            },
        }
    if task.gpu_spec:
        term = {"matchExpressions": [
            {"key": MODEL_LABEL, "operator": "In", "values": list(task.gpu_spec)}
        ]}  # fmt: skip
        pod["spec"]["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [term]}}
        }  # fmt: skip
    return pod


def openb_workload(tasks: list[OpenbTask], inflation: bool) -> WorkloadFile:
    """The tasks as trace entries: one a second forever (inflation) or as recorded."""
    entries = []
    for i, task in enumerate(tasks):
        if inflation:
            arrival, duration = float(i), NEVER
        else:
            arrival, duration = float(task.creation), float(task.deletion - task.creation)
        name = f"{task.name}-{i}"
        entries.append(TraceEntry(name=name, arrival=arrival, duration=duration, pod=_pod(task)))
    return WorkloadFile(workloads=entries)


def inflated(
    tasks: list[OpenbTask], factor: float, seed: int, cluster_gpus: int
) -> list[OpenbTask]:
    """Tasks drawn with replacement until their GPU requests reach `factor` × cluster GPUs;
    InputError when that takes more than `MAX_TRACE_PODS` pods."""
    if not any(t.num_gpu for t in tasks):
        raise InputError("--inflate: the task list has no GPU task to inflate with")
    rng = random.Random(seed)
    target = factor * cluster_gpus
    drawn: list[OpenbTask] = []
    arrived = 0.0
    while arrived < target - 1e-9:
        if len(drawn) == MAX_TRACE_PODS:
            raise InputError(
                f"--inflate {factor:g}: more than {MAX_TRACE_PODS:,} pods drawn before the arrived"
                f" GPU request reached {target:g} GPUs: the limit is {MAX_TRACE_PODS:,} pods"
            )
        task = tasks[rng.randrange(len(tasks))]
        drawn.append(task)
        arrived += task.gpu_request
    return drawn


def load_openb(
    nodes_csv: Path, tasks_csv: Path, inflate: float | None = None, seed: int = 42
) -> OpenbRun:
    """Read both files and build the run (InputError on bad input)."""
    nodes = read_nodes(nodes_csv)
    tasks = read_tasks(tasks_csv, replay=inflate is None)
    gpus = sum(n.gpus for n in nodes)
    if gpus > MAX_CLUSTER_GPUS:
        raise InputError(
            f"{nodes_csv}: openb node list: {too_many(gpus, 'GPUs', MAX_CLUSTER_GPUS)}"
        )
    if inflate is None:
        ordered = sorted(tasks, key=lambda t: t.creation)
        return OpenbRun(openb_cluster(nodes), openb_workload(ordered, False),
                        tuple(t.gpu_request for t in ordered), gpus, None)  # fmt: skip
    try:
        drawn = inflated(tasks, inflate, seed, gpus)
    except InputError as exc:
        raise InputError(f"{tasks_csv}: {exc}") from None
    return OpenbRun(openb_cluster(nodes), openb_workload(drawn, True),
                    tuple(t.gpu_request for t in drawn), gpus, float(len(drawn) - 1))  # fmt: skip
