"""`tensor-fusion uninstall`: remove `tensor-fusion.ai/finalizer` from every pod.

The chart runs it as a pre-delete hook, so that no pod is left Terminating once no controller
is there to release it (scheduling.md §12). It is idempotent and safe to run again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tensorfusion.domain.annotations import KEYS

__all__ = ["UninstallReport", "remove_finalizers"]

_log = logging.getLogger(__name__)
_ATTEMPTS: Final = 5


@dataclass(slots=True)
class UninstallReport:
    """Pods whose finalizer was removed, and those that could not be changed (with why)."""

    cleared: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def remove_finalizers(client: AsyncClient) -> UninstallReport:
    """Strip our finalizer from every pod of every namespace that carries it."""
    report = UninstallReport()
    async for pod in client.list(Pod, namespace="*"):
        metadata = pod.metadata
        if metadata is None or KEYS.finalizer not in (metadata.finalizers or ()):
            continue
        key = f"{metadata.namespace}/{metadata.name}"
        problem = await _strip(client, str(metadata.name), str(metadata.namespace))
        if problem is None:
            report.cleared.append(key)
            _log.info("finalizer removed from pod %s", key)
        else:
            report.failed[key] = problem
            _log.error("finalizer not removed from pod %s: %s", key, problem)
    return report


async def _strip(client: AsyncClient, name: str, namespace: str) -> str | None:
    """Remove the finalizer by a JSON patch guarded by the list it was read from."""
    problem = "not attempted"
    for _ in range(_ATTEMPTS):
        try:
            pod = await client.get(Pod, name, namespace=namespace)
        except ApiError as error:
            return None if error.status.code == 404 else error.status.message
        finalizers = list((pod.metadata.finalizers if pod.metadata else None) or ())
        if KEYS.finalizer not in finalizers:
            return None
        patch = [
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "replace", "path": "/metadata/finalizers",
             "value": [f for f in finalizers if f != KEYS.finalizer]},
        ]  # fmt: skip
        try:
            await client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.JSON)
            return None
        except ApiError as error:
            if error.status.code == 404:
                return None
            problem = error.status.message or str(error)
            if error.status.code not in (409, 422):
                return problem
    return problem
