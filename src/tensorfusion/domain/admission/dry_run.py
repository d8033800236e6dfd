"""From a pod as a user writes it to an allocation request: the admission dry run, then the
parse of the normalised annotations (the same code the webhook and the extender run).

Behind `simulate-schedule` and the simulator: nothing is written, and the pod index comes
from a `PodIndexCounter`, taken (the simulator admits pod after pod) or previewed (a dry run
of one pod, which must not advance the index).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorfusion.domain.admission.facts import AdmissionFacts
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.admission.pod_index import PodIndexCounter
from tensorfusion.domain.allocation_request import AllocationRequest
from tensorfusion.domain.annotation_errors import AnnotationError
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import GPU, GPUPool, GPUResourceQuota
from tensorfusion.domain.object_views import labels_of, name_of, namespace_of
from tensorfusion.domain.pod_request import request_from_pod

__all__ = [
    "NotAGPUWorkerError",
    "PodPreparer",
    "PreparationError",
    "PreparedPod",
    "not_a_gpu_worker",
]


class PreparationError(ValueError):
    """The pod would be denied at admission, or is not a GPU worker."""


class NotAGPUWorkerError(PreparationError):
    """The pod has neither label `enabled: "true"` nor `component: worker`."""


def not_a_gpu_worker(pod: Mapping[str, Any]) -> str | None:
    """Why admission would not act on the pod (`NotAGPUWorker`), or None when it would."""
    labels = labels_of(pod)
    if labels.get(KEYS.component) == "worker" or labels.get(KEYS.enabled) == "true":
        return None
    who = f"{namespace_of(pod) or 'default'}/{name_of(pod) or 'pod'}"
    return (
        f"pod {who} is not a GPU worker (NotAGPUWorker): it has neither "
        f'label {KEYS.enabled}: "true" nor {KEYS.component}: worker'
    )


@dataclass(frozen=True, slots=True)
class PreparedPod:
    """The admitted pod, what it asks of the allocator, and admission's warnings."""

    pod: Mapping[str, Any]
    request: AllocationRequest
    warnings: list[str]
    mutated: bool


@dataclass(slots=True)
class PodPreparer:
    """Runs admission as a dry run against fixed pools, quotas (by namespace) and GPUs."""

    pools: Mapping[str, GPUPool]
    quotas: Mapping[str, GPUResourceQuota]
    gpus: Sequence[GPU] = ()
    index: PodIndexCounter = field(default_factory=PodIndexCounter)

    def prepare(
        self,
        manifest: Mapping[str, Any],
        name: str,
        namespace: str,
        uid: str,
        mutate: bool = True,
        *,
        advance_index: bool = True,
    ) -> PreparedPod:
        """Admit (dry run) unless the pod is already a worker or `mutate` is off, then parse
        the annotations; PreparationError carries admission's or the parser's message.

        `advance_index`: take the pod index from the counter (a pod admitted for good, as in
        the simulator); False previews it without advancing (a one-pod dry run).
        """
        pod = copy.deepcopy(dict(manifest))
        metadata = pod.setdefault("metadata", {})
        metadata["name"], metadata["namespace"], metadata["uid"] = name, namespace, uid
        problem = not_a_gpu_worker(pod)
        if problem is not None:
            raise NotAGPUWorkerError(problem)
        worker = (metadata.get("labels") or {}).get(KEYS.component) == "worker"
        mutated = False
        warnings: list[str] = []
        if not worker and mutate:
            decision = admit(pod, self._facts(namespace, advance_index))
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

    def _facts(self, namespace: str, advance_index: bool) -> AdmissionFacts:
        return AdmissionFacts(
            namespace=namespace,
            pod_index=self.index.take() if advance_index else self.index.peek(),
            pools=self.pools,
            quota=self.quotas.get(namespace),
            gpus=self.gpus,
            dry_run=True,
        )
