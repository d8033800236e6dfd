"""The cluster file's pools, quotas and GPUs as the typed objects admission reads, and the
admission dry run over them (`tensorfusion.domain.admission.dry_run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorfusion.domain.admission.dry_run import PodPreparer, PreparationError, PreparedPod
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import (
    API_VERSION,
    GPU,
    FieldIssue,
    GPUPool,
    GPUResourceQuota,
    ModelError,
    load_as,
)
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.input_errors import InputError

__all__ = [
    "PodPreparer",
    "PreparationError",
    "PreparedPod",
    "gpu_objects",
    "pool_objects",
    "quota_objects",
]


def pool_objects(cluster: ClusterFile) -> dict[str, GPUPool]:
    """GPUPool objects of the cluster file, by name."""
    pools: dict[str, GPUPool] = {}
    for pool in cluster.pools:
        spec: dict[str, Any] = {
            "nodeManagerConfig": {"defaultIsolationMode": pool.default_isolation_mode},
        }
        if pool.default_qos is not None:
            spec["qosConfig"] = {"defaultQoS": pool.default_qos}
        raw = {
            "apiVersion": API_VERSION,
            "kind": "GPUPool",
            "metadata": {
                "name": pool.name,
                "annotations": {KEYS.is_default_pool: "true" if pool.is_default else "false"},
            },
            "spec": spec,
        }
        pools[pool.name] = load_as(GPUPool, raw)
    return pools


def gpu_objects(cluster: ClusterFile) -> list[GPU]:
    """One GPU object per hardware model (what `dedicated-gpu` reads: model and capacity)."""
    return [
        load_as(
            GPU,
            {
                "apiVersion": API_VERSION,
                "kind": "GPU",
                "metadata": {"name": f"model-{i}"},
                "status": {
                    "gpuModel": h.model,
                    "vendor": h.vendor,
                    "capacity": {"tflops": h.fp16_tflops, "vram": h.vram},
                },
            },
        )
        for i, h in enumerate(cluster.hardware)
    ]


def quota_objects(cluster: ClusterFile, path: Path) -> dict[str, GPUResourceQuota]:
    """GPUResourceQuota objects by namespace; InputError names the cluster file's field."""
    quotas: dict[str, GPUResourceQuota] = {}
    for i, quota in enumerate(cluster.quotas):
        raw = {
            "apiVersion": API_VERSION,
            "kind": "GPUResourceQuota",
            "metadata": {"name": quota.name, "namespace": quota.namespace},
            "spec": quota.spec(),
        }
        try:
            quotas[quota.namespace] = load_as(GPUResourceQuota, raw)
        except ModelError as error:
            raise InputError(
                "\n".join(_quota_issue(path, i, issue) for issue in error.issues)
            ) from None
    return quotas


def _quota_issue(path: Path, index: int, issue: FieldIssue) -> str:
    field = f"quotas[{index}].{issue.path.removeprefix('spec.')}"
    shown = "" if issue.value is None else f" invalid value {issue.value}:"
    return f"{path}: cluster: {field}:{shown} {issue.message}"
