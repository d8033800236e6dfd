"""From a pod as a user writes it to an allocation request: the admission dry run, then the
parse of the normalised annotations (the same code the webhook and the extender run)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.facts import AdmissionFacts
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model.meta import API_VERSION
from tensorfusion.domain.pod_request import request_from_pod
from tensorfusion.sim.cluster_file import ClusterFile

__all__ = [
    "PodPreparer",
    "PreparationError",
    "PreparedPod",
    "gpu_objects",
    "pool_objects",
    "quota_objects",
]

MAX_POD_INDEX = 128


class PreparationError(ValueError):
    """The pod would be denied at admission, or is not a GPU worker."""


@dataclass(frozen=True, slots=True)
class PreparedPod:
    """The admitted pod, what it asks of the allocator, and admission's warnings."""

    pod: Mapping[str, Any]
    request: AllocationRequest
    warnings: list[str]
    mutated: bool


def pool_objects(cluster: ClusterFile) -> dict[str, dict[str, Any]]:
    """GPUPool objects of the cluster file, as admission reads them."""
    pools: dict[str, dict[str, Any]] = {}
    for pool in cluster.pools:
        spec: dict[str, Any] = {
            "nodeManagerConfig": {"defaultIsolationMode": pool.default_isolation_mode},
        }
        if pool.default_qos is not None:
            spec["qosConfig"] = {"defaultQoS": pool.default_qos}
        pools[pool.name] = {
            "apiVersion": API_VERSION,
            "kind": "GPUPool",
            "metadata": {
                "name": pool.name,
                "annotations": {KEYS.is_default_pool: "true" if pool.is_default else "false"},
            },
            "spec": spec,
        }
    return pools


def gpu_objects(cluster: ClusterFile) -> list[dict[str, Any]]:
    """One GPU object per hardware model (what `dedicated-gpu` reads: model and capacity)."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "GPU",
            "metadata": {"name": f"model-{i}"},
            "status": {
                "gpuModel": h.model,
                "vendor": h.vendor,
                "capacity": {"tflops": h.fp16_tflops, "vram": h.vram},
            },
        }
        for i, h in enumerate(cluster.hardware)
    ]


def quota_objects(cluster: ClusterFile) -> dict[str, dict[str, Any]]:
    """GPUResourceQuota objects by namespace."""
    return {
        q.namespace: {
            "apiVersion": API_VERSION,
            "kind": "GPUResourceQuota",
            "metadata": {"name": q.name, "namespace": q.namespace},
            "spec": q.spec(),
        }
        for q in cluster.quotas
    }


@dataclass(slots=True)
class PodPreparer:
    """Runs admission as a dry run against the virtual cluster's pools and quotas."""

    pools: dict[str, dict[str, Any]]
    quotas: dict[str, dict[str, Any]]
    gpus: list[dict[str, Any]] = field(default_factory=list)
    next_index: int = 1

    def prepare(
        self,
        manifest: Mapping[str, Any],
        name: str,
        namespace: str,
        uid: str,
        mutate: bool = True,
    ) -> PreparedPod:
        """Admit (dry run) unless the pod is already a worker or `mutate` is off, then parse
        the annotations; PreparationError carries admission's or the parser's message."""
        pod = copy.deepcopy(dict(manifest))
        metadata = pod.setdefault("metadata", {})
        metadata["name"], metadata["namespace"], metadata["uid"] = name, namespace, uid
        labels = metadata.get("labels") or {}
        worker = labels.get(KEYS.component) == "worker"
        if not worker and labels.get(KEYS.enabled) != "true":
            raise PreparationError(
                f"pod {namespace}/{name} is not a GPU worker (NotAGPUWorker): it has neither "
                f'label {KEYS.enabled}: "true" nor {KEYS.component}: worker'
            )
        mutated = False
        warnings: list[str] = []
        if not worker and mutate:
            decision = admit(pod, self._facts(namespace))
            if not decision.allowed:
                raise PreparationError(decision.message)
            warnings = list(decision.warnings)
            pod = copy.deepcopy(dict(decision.mutated_pod or pod))
            mutated = True
        try:
            request = request_from_pod(pod)
        except AnnotationError as exc:
            raise PreparationError(exc.message) from None
        return PreparedPod(pod, request, warnings, mutated)

    def _facts(self, namespace: str) -> AdmissionFacts:
        index = self.next_index
        self.next_index = index % MAX_POD_INDEX + 1
        return AdmissionFacts(
            namespace=namespace,
            pod_index=index,
            pools=self.pools,
            quota=self.quotas.get(namespace),
            gpus=self.gpus,
            dry_run=True,
            name_suffix="sim12345",
        )
