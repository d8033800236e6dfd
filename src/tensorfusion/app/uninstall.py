"""`tensor-fusion uninstall`: remove `tensor-fusion.ai/finalizer` from every pod.

The chart runs it as a pre-delete hook, so that no pod is left Terminating once no controller
is there to release it (scheduling.md §12). It is idempotent and safe to run again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.adapters.kube.client import KubeClient
from tensorfusion.adapters.kube.pod_finalizers import pods_with_finalizer, remove_pod_finalizer
from tensorfusion.domain.annotations import KEYS

__all__ = ["UninstallReport", "remove_finalizers"]

_log = logging.getLogger(__name__)
_ATTEMPTS: Final = 5


@dataclass(slots=True)
class UninstallReport:
    """Pods whose finalizer was removed, and those that could not be changed (with why)."""

    cleared: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def remove_finalizers(client: KubeClient) -> UninstallReport:
    """Strip our finalizer from every pod of every namespace that carries it."""
    report = UninstallReport()
    async for namespace, name in pods_with_finalizer(client, KEYS.finalizer):
        key = f"{namespace}/{name}"
        problem = await remove_pod_finalizer(client, name, namespace, KEYS.finalizer, _ATTEMPTS)
        if problem is None:
            report.cleared.append(key)
            _log.info("finalizer removed from pod %s", key)
        else:
            report.failed[key] = problem
            _log.error("finalizer not removed from pod %s: %s", key, problem)
    return report
