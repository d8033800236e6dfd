"""One pod CREATE admitted for good (admission.md §4 steps 16-17, §8, §12).

`ClusterAdmitter.admit` gathers the facts, runs the pure pipeline, takes the pod's index only
for a pod that passed it (a denial spends none) and, unless it is a dry run, performs its
writes in order: (a) the enabled-replicas counter on the pod's controller owner,
raised by one with the owner's resourceVersion as the precondition; (b) the
TensorFusionWorkload, created or merge-patched (no API call when the replica's cache holds it
as wanted, the typical pod). A conflict in (a) means another admission
counted meanwhile: the whole admission runs again on a fresh read (so the gate sees the new
count), up to 5 times 10 ms apart doubling, then 503. A failure of (b) takes (a) back and is a
503. Nothing is written for a denial.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import orjson

from tensorfusion.adapters.http_client import HttpResponse
from tensorfusion.adapters.kube.client import FIELD_MANAGER, KubeClient, raw_http
from tensorfusion.admission.cluster_sources import owner_path
from tensorfusion.admission.facts_gathering import (
    AdmissionSettings,
    AdmissionSources,
    PodIndex,
    deadline_of,
    gather_facts,
    take_pod_index,
)
from tensorfusion.admission.webhook_app import TransientAdmissionError
from tensorfusion.domain.admission.decision import AdmissionDecision
from tensorfusion.domain.admission.pipeline import PendingMutation, decide
from tensorfusion.domain.admission.replica_gate import (
    CounterIncrement,
    decremented_count,
    incremented_count,
)
from tensorfusion.domain.admission.review import AdmissionRequest
from tensorfusion.domain.admission.workload import WorkloadWrite
from tensorfusion.runtime.informer import ObjectCache

__all__ = ["COUNTER_ATTEMPTS", "ClusterAdmitter"]

COUNTER_ATTEMPTS: Final = 6
"""The first try and 5 conflict retries."""
COUNTER_BACKOFF_S: Final = 0.01
_WORKLOADS: Final = "/apis/tensor-fusion.ai/v1/namespaces/{namespace}/tensorfusionworkloads"


class _ConflictError(Exception):
    """The owner changed since it was read."""


class ClusterAdmitter:
    """`Admitter` of a controller replica."""

    def __init__(
        self,
        client: KubeClient,
        sources: AdmissionSources,
        settings: AdmissionSettings,
        workloads: ObjectCache | None = None,
    ) -> None:
        self._client = client
        self._sources = sources
        self.settings = settings
        self._workloads = workloads

    async def admit(self, request: AdmissionRequest) -> AdmissionDecision:
        """Facts, pipeline, index, writes; TransientAdmissionError for what should be retried."""
        deadline = deadline_of(self.settings)
        index: PodIndex | None = None
        for attempt in range(COUNTER_ATTEMPTS):
            facts = await gather_facts(request, self._sources, self.settings, deadline=deadline)
            verdict = decide(request.object, facts)
            if not isinstance(verdict, PendingMutation):
                return verdict
            if index is None:  # taken once, kept through counter conflicts
                index = await take_pod_index(
                    self._sources, self.settings, preview=request.dry_run, deadline=deadline
                )
            decision = verdict.complete(index.value, (index.warning,) if index.warning else ())
            if request.dry_run:
                return decision
            increment = decision.counter_increment
            if increment is not None:
                owner = facts.owners.get((increment.api_version, increment.kind, increment.name))
                try:
                    await self._count(increment, owner, +1)
                except _ConflictError:
                    await asyncio.sleep(COUNTER_BACKOFF_S * 2**attempt)
                    continue
            if decision.workload is not None:
                try:
                    await self._write_workload(decision.workload)
                except Exception as error:
                    if increment is not None:
                        await self._take_back(increment)
                    raise TransientAdmissionError(
                        "writing the TensorFusionWorkload", error
                    ) from error
            return decision
        raise TransientAdmissionError(
            "counting enabled replicas",
            f"the owner changed under {COUNTER_ATTEMPTS} attempts in a row",
        )

    # ---- (a) the counter -------------------------------------------------------------------

    async def _count(
        self, increment: CounterIncrement, owner: Mapping[str, Any] | None, step: int
    ) -> None:
        ref = {"apiVersion": increment.api_version, "kind": increment.kind,
               "name": increment.name}  # fmt: skip
        path = owner_path(increment.namespace, ref)
        if path is None or owner is None:
            unreadable = f"{increment.kind} {increment.name} cannot be read"
            raise TransientAdmissionError("counting enabled replicas", unreadable)
        metadata = owner.get("metadata") or {}
        counted = (incremented_count if step > 0 else decremented_count)(owner, increment.key)
        body = {"metadata": {
            "resourceVersion": metadata.get("resourceVersion"),
            "annotations": {increment.key: counted},
        }}  # fmt: skip
        response = await self._send("PATCH", path, body, "application/merge-patch+json")
        if response.status_code == 409:
            raise _ConflictError(path)
        if response.status_code >= 300:
            raise TransientAdmissionError("counting enabled replicas", _message(response))

    async def _take_back(self, increment: CounterIncrement) -> None:
        """Compensation: one less on the owner (best effort, retried on conflicts)."""
        ref = {"apiVersion": increment.api_version, "kind": increment.kind,
               "name": increment.name}  # fmt: skip
        for attempt in range(COUNTER_ATTEMPTS):
            owner = await self._sources.owner(increment.namespace, ref)
            if owner is None:
                return
            try:
                await self._count(increment, owner, -1)
            except _ConflictError:
                await asyncio.sleep(COUNTER_BACKOFF_S * 2**attempt)
                continue
            except TransientAdmissionError:
                return  # the recount heals it
            return

    # ---- (b) the workload ------------------------------------------------------------------

    async def _write_workload(self, write: WorkloadWrite) -> None:
        cached = self._workloads.get(write.name, write.namespace) if self._workloads else None
        if cached is not None and write.spec_patch(cached) is None:
            return  # the typical pod: its workload exists as wanted, no API call
        collection = _WORKLOADS.format(namespace=write.namespace)
        path = f"{collection}/{write.name}"
        for _ in range(3):
            found = await self._send("GET", path)
            if found.status_code == 404:
                created = await self._send("POST", collection, dict(write.body))
                if created.status_code == 409:
                    continue  # created meanwhile by another admission: patch it
                _raise_for(created)
                return
            _raise_for(found)
            patch = write.spec_patch(orjson.loads(found.content))
            if patch is None:
                return
            patched = await self._send("PATCH", path, patch, "application/merge-patch+json")
            _raise_for(patched)
            return
        raise RuntimeError(f"workload {write.namespace}/{write.name} kept changing")

    async def _send(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> HttpResponse:
        return await raw_http(self._client).request(
            method, path, params={"fieldManager": FIELD_MANAGER} if body is not None else None,
            content=orjson.dumps(body) if body is not None else None,
            headers={"Content-Type": content_type},
        )  # fmt: skip


def _message(response: HttpResponse) -> str:
    try:
        return str(orjson.loads(response.content).get("message") or response.text)
    except (orjson.JSONDecodeError, AttributeError):
        return response.text


def _raise_for(response: HttpResponse) -> None:
    if response.status_code >= 300:
        raise RuntimeError(f"HTTP {response.status_code}: {_message(response)}")
