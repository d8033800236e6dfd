"""What one metrics cycle of the agent records (metrics.md §3.1, §3.2), from the provider's
samples and the pods bound to the node: one `GPUUsageSample` per sampled GPU and one
`WorkerUsageSample` per (worker, allocated GPU) for every worker holding GPUs, idle or not.

A worker is a pod on the node whose `gpu-ids` names GPUs and that has not ended. Its share,
VRAM and limiter counters come from the samples keyed by pod name (only the simulated
provider has them; 0 otherwise); its VRAM limit from `vram-limit` (else the GPU's total); its
workload from the `workload` label (`unknown` when absent). While the node's MPS daemon serves,
each row also carries the limits MPS holds the worker to (`client_limits` of its isolation mode
and limits), and on a GPU whose samples have no limiter counters a hard worker's
`compute_throttled_cnt` counts the samples at its SM share (`ShareTicks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.devices.gpu_objects import gpu_name
from tensorfusion.domain.devices.inventory import DeviceSample, LimiterCounters
from tensorfusion.domain.isolation.committed_limits import annotated_limits
from tensorfusion.domain.isolation.mps_client import ClientLimits, client_limits
from tensorfusion.domain.isolation.mps_daemon import MpsStatus
from tensorfusion.domain.isolation.share_ticks import ShareTicks
from tensorfusion.domain.metrics.extra_tags import extra_tags
from tensorfusion.domain.metrics.recorders import GPUUsageSample, WorkerUsageSample
from tensorfusion.domain.object_views import annotations_of, labels_of, name_of, namespace_of
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["NodeGPUCapacity", "Worker", "usage_samples", "workers_of"]

UNKNOWN_WORKLOAD = "unknown"


@dataclass(frozen=True, slots=True)
class Worker:
    """A pod holding GPUs on this node."""

    pod: str
    namespace: str
    pool: str
    workload: str
    gpus: tuple[str, ...]
    """GPU object names (lower-case uuids) from `gpu-ids`."""
    limit: ResourceAmount = field(default_factory=ResourceAmount)
    """Per GPU, from `tflops-limit`, `compute-percent-limit`, `vram-limit` (0 when absent or
    invalid)."""
    isolation: IsolationMode = IsolationMode.SOFT
    extra_tags: Mapping[str, str] = field(default_factory=dict)
    """`metricsExtraPodLabels` resolved for the pod."""


@dataclass(frozen=True, slots=True)
class NodeGPUCapacity:
    """The node's identity and what the last discovery knew of its GPUs, by GPU name."""

    node: str
    pool: str
    tflops_milli: Mapping[str, int]
    vram_bytes: Mapping[str, int]
    mps: MpsStatus | None = None
    """The node's MPS daemon; None where it does not run."""
    enforced: Mapping[tuple[str, str], ClientLimits] = field(default_factory=dict)
    """What Allocate gave each worker (namespace, pod) from its committed limits; a worker
    allocated before the agent started is computed from its annotations instead."""


def workers_of(
    pods: Iterable[Mapping[str, Any]],
    default_pool: str,
    extra_labels: Mapping[str, str] | None = None,
) -> list[Worker]:
    """The workers among the node's pods (not ended, with a non-empty `gpu-ids`), with the
    extra tags of `extra_labels` (pod label key -> tag name)."""
    found: list[Worker] = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        annotations = annotations_of(pod)
        gpus = tuple(
            name.strip().lower()
            for name in str(annotations.get(KEYS.gpu_ids) or "").split(",")
            if name.strip()
        )
        if not gpus:
            continue
        labels = labels_of(pod)
        isolation, limit = annotated_limits(annotations)
        found.append(
            Worker(
                pod=name_of(pod),
                namespace=namespace_of(pod),
                pool=str(annotations.get(KEYS.gpupool) or default_pool),
                workload=str(labels.get(KEYS.workload) or UNKNOWN_WORKLOAD),
                gpus=gpus,
                isolation=isolation,
                limit=limit,
                extra_tags=extra_tags(labels, extra_labels) if extra_labels else {},
            )
        )
    return found


def _gpu_sample(node: NodeGPUCapacity, sample: DeviceSample) -> GPUUsageSample:
    name = gpu_name(sample.uuid)
    return GPUUsageSample(
        node=node.node, pool=node.pool, uuid=name,
        compute_percentage=sample.compute_percentage,
        capacity_tflops=node.tflops_milli.get(name, 0) / 1000,
        memory_bytes=sample.memory_used_bytes,
        memory_total_bytes=node.vram_bytes.get(name, 0),
        temperature=sample.temperature_c, power_usage=sample.power_w,
        rx=sample.pcie_rx_kb_per_s, tx=sample.pcie_tx_kb_per_s,
        graphics_clock_mhz=sample.graphics_clock_mhz, sm_clock_mhz=sample.sm_clock_mhz,
        memory_clock_mhz=sample.memory_clock_mhz, video_clock_mhz=sample.video_clock_mhz,
        nvlink_rx=sample.nvlink_rx_kb_per_s, nvlink_tx=sample.nvlink_tx_kb_per_s,
        mps_daemon_up=node.mps is not None and node.mps.serving,
        mps_daemon_restarts=node.mps.restarts if node.mps is not None else 0,
    )  # fmt: skip


def _worker_sample(
    node: NodeGPUCapacity,
    worker: Worker,
    gpu: str,
    sample: DeviceSample | None,
    ticks: ShareTicks,
) -> WorkerUsageSample:
    share = dict(sample.worker_compute_percentage) if sample else {}
    memory = dict(sample.worker_memory_bytes) if sample else {}
    limiter = dict(sample.limiter) if sample else {}
    counters = limiter.get(worker.pod, LimiterCounters())
    used = share.get(worker.pod, 0.0)
    enforced = None
    if node.mps is not None and node.mps.serving:
        enforced = node.enforced.get((worker.namespace, worker.pod)) or client_limits(
            worker.isolation, worker.limit, [node.tflops_milli.get(g, 0) for g in worker.gpus]
        )
    throttled = counters.compute_throttled
    if enforced is not None and worker.pod not in limiter:
        throttled = ticks.observe((worker.namespace, worker.pod, gpu), used, enforced.sm_percent)
    return WorkerUsageSample(
        worker=worker.pod, namespace=worker.namespace, pool=worker.pool, node=node.node,
        uuid=gpu, workload=worker.workload,
        compute_percentage=used,
        capacity_tflops=node.tflops_milli.get(gpu, 0) / 1000,
        memory_bytes=memory.get(worker.pod, 0),
        memory_limit_bytes=worker.limit.vram_bytes or node.vram_bytes.get(gpu, 0),
        compute_throttled_cnt=throttled,
        vram_freezed_cnt=counters.vram_freezed,
        vram_resumed_cnt=counters.vram_resumed,
        enforced_vram_limit_bytes=enforced.vram_bytes if enforced else 0,
        enforced_compute_percent=float(enforced.sm_percent) if enforced else 0.0,
        usage_known=worker.pod in share,
        extra_tags=worker.extra_tags,
    )  # fmt: skip


def usage_samples(
    node: NodeGPUCapacity,
    samples: Sequence[DeviceSample],
    workers: Sequence[Worker],
    ticks: ShareTicks | None = None,
) -> tuple[list[GPUUsageSample], list[WorkerUsageSample]]:
    """One cycle's GPU samples and worker samples (a row per worker and allocated GPU);
    `ticks` carries the throttle ticks of MPS-held workers from cycle to cycle."""
    ticks = ticks if ticks is not None else ShareTicks()
    by_gpu = {gpu_name(sample.uuid): sample for sample in samples}
    gpus = [_gpu_sample(node, sample) for sample in samples]
    per_worker = [
        _worker_sample(node, worker, gpu, by_gpu.get(gpu), ticks)
        for worker in workers
        for gpu in worker.gpus
    ]
    ticks.keep_only({(w.namespace, w.pod, gpu) for w in workers for gpu in w.gpus})
    return gpus, per_worker
