"""The facts one pod's admission reads (admission.md §4 "gather"), fetched by need.

`gather_facts` asks `facts_needed` what the pipeline will read for this pod and fetches only
that from `AdmissionSources`: pools, the profile, the namespace's quota, GPUs and namespace
labels from the informer caches (no API call) and the pod's controller owners through the API.
`take_pod_index` takes the pod index (the leader's cyclic counter, previewed on a dry run) once
the pipeline has passed the pod. One request shares one deadline (8 s by default); running
out, or any source failing, is a `TransientAdmissionError` naming the step, which the webhook
answers with 503.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tensorfusion.admission.webhook_app import TransientAdmissionError
from tensorfusion.domain.admission.auto_migration import AutoMigrationConfig
from tensorfusion.domain.admission.facts import AUTO_MIGRATION_OFF, AdmissionFacts, facts_needed
from tensorfusion.domain.admission.facts_loading import load_facts, read_object
from tensorfusion.domain.admission.review import AdmissionRequest
from tensorfusion.domain.admission.workload_identity import owner_key
from tensorfusion.domain.annotations import KEYS, Keys
from tensorfusion.domain.model import GPUPool
from tensorfusion.domain.native_resources import DEFAULT_NATIVE_RESOURCES
from tensorfusion.domain.object_views import name_of, namespace_of, resource_version_of, uid_of

__all__ = [
    "DEADLINE_S",
    "AdmissionSettings",
    "AdmissionSources",
    "PodIndex",
    "gather_facts",
    "take_pod_index",
]

DEADLINE_S: Final = 8.0


@dataclass(frozen=True, slots=True)
class PodIndex:
    """The pod index to use, and a warning when it is not the leader's (random fallback)."""

    value: int
    warning: str | None = None


class AdmissionSources(Protocol):
    """Where the facts come from: caches (synchronous) and the API (async)."""

    def pools(self) -> Sequence[Mapping[str, Any]]: ...

    def profile(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def quota(self, namespace: str) -> Mapping[str, Any] | None: ...

    def gpus(self) -> Sequence[Mapping[str, Any]]: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None: ...

    async def owner(
        self, namespace: str, ref: Mapping[str, Any], *, fresh: bool = True
    ) -> Mapping[str, Any] | None:
        """The owner object (None when it no longer exists); read now when `fresh`, else a
        recent read may answer."""
        ...

    async def pod_index(self, *, preview: bool) -> PodIndex:
        """The next pod index; `preview` does not advance the counter (dry run)."""
        ...


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """The process settings admission reads (dynamic config and environment)."""

    native_resources: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_NATIVE_RESOURCES)
    )
    auto_migration: AutoMigrationConfig = AUTO_MIGRATION_OFF
    progressive_migration: bool = False
    deadline_s: float = DEADLINE_S
    keys: Keys = KEYS


class _ReadPools:
    """GPUPools read once per resourceVersion (a pool changes rarely, pods arrive often)."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[str, GPUPool]] = {}

    def read(self, raw: Mapping[str, Any]) -> Mapping[str, Any] | GPUPool:
        """The pool read, or `raw` itself when it does not read (load_facts reports it)."""
        version = resource_version_of(raw)
        key = f"{uid_of(raw)}/{name_of(raw)}"
        known = self._read.get(key)
        if version and known is not None and known[0] == version:
            return known[1]
        pool = read_object(GPUPool, raw)
        if not isinstance(pool, GPUPool):
            return raw
        if version:
            if len(self._read) > _READ_POOLS_MAX:
                self._read.clear()
            self._read[key] = (version, pool)
        return pool


_READ_POOLS_MAX: Final = 1024
_POOLS = _ReadPools()


def deadline_of(settings: AdmissionSettings) -> float:
    """The event-loop time by which one request must have what it reads."""
    return asyncio.get_running_loop().time() + settings.deadline_s


async def take_pod_index(
    sources: AdmissionSources, settings: AdmissionSettings, *, preview: bool, deadline: float
) -> PodIndex:
    """The pod's index (not advancing the counter when `preview`), by `deadline`."""
    try:
        async with asyncio.timeout_at(deadline):
            return await sources.pod_index(preview=preview)
    except TimeoutError:
        raise TransientAdmissionError("taking a pod index", _late(settings)) from None
    except TransientAdmissionError:
        raise
    except Exception as error:
        raise TransientAdmissionError("taking a pod index", error) from None


def _late(settings: AdmissionSettings) -> str:
    return f"no answer within the {settings.deadline_s:.0f} s admission deadline"


async def gather_facts(
    request: AdmissionRequest,
    sources: AdmissionSources,
    settings: AdmissionSettings,
    *,
    deadline: float | None = None,
) -> AdmissionFacts:
    """The facts of one pod CREATE but its index (`pod_index` 0 until `take_pod_index`);
    TransientAdmissionError when a source fails or is late."""
    pod = request.object
    namespace = request.namespace or namespace_of(pod)
    needs = facts_needed(pod, native_resources=settings.native_resources,
                         auto_migration=settings.auto_migration, keys=settings.keys)  # fmt: skip
    common: dict[str, Any] = {
        "native_resources": settings.native_resources,
        "auto_migration": settings.auto_migration,
        "progressive_migration": settings.progressive_migration,
        "dry_run": request.dry_run,
        "keys": settings.keys,
    }
    step = "reading the namespace"
    try:
        async with asyncio.timeout_at(deadline if deadline is not None else deadline_of(settings)):
            labels = sources.namespace_labels(namespace) if needs.namespace_labels else None
            if not needs.tf_candidate:
                return load_facts(namespace=namespace, pod_index=0, namespace_labels=labels,
                                  **common)  # fmt: skip
            step = "reading the pod's owners"
            owners = {
                owner_key(ref): await sources.owner(namespace, ref, fresh=needs.fresh_owners)
                for ref in needs.owners
            }
    except TimeoutError:
        raise TransientAdmissionError(step, _late(settings)) from None
    except TransientAdmissionError:
        raise
    except Exception as error:
        raise TransientAdmissionError(step, error) from None
    wanted = needs.pool_names
    pools = {
        name_of(p): _POOLS.read(p)
        for p in sources.pools()
        if wanted is None or name_of(p) in wanted
    }
    return load_facts(
        namespace=namespace,
        pod_index=0,
        pools=pools,
        profile=sources.profile(namespace, needs.profile) if needs.profile else None,
        quota=sources.quota(namespace) if needs.quota else None,
        gpus=sources.gpus() if needs.gpus else (),
        owners=owners,
        namespace_labels=labels,
        **common,
    )
