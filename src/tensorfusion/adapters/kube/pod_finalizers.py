"""Pods carrying a finalizer, and its removal by a JSON patch guarded by the list it was read
from (`tensor-fusion uninstall`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

__all__ = ["pods_with_finalizer", "remove_pod_finalizer"]


async def pods_with_finalizer(
    client: AsyncClient, finalizer: str
) -> AsyncIterator[tuple[str, str]]:
    """`(namespace, name)` of every pod of every namespace whose finalizers hold `finalizer`."""
    async for pod in client.list(Pod, namespace="*"):
        metadata = pod.metadata
        if metadata is None or finalizer not in (metadata.finalizers or ()):
            continue
        yield str(metadata.namespace), str(metadata.name)


async def remove_pod_finalizer(
    client: AsyncClient, name: str, namespace: str, finalizer: str, attempts: int
) -> str | None:
    """Remove `finalizer` from the pod, reading it again after a conflict, at most `attempts`
    times; None when done (or the pod or its finalizer is gone), else why not."""
    problem = "not attempted"
    for _ in range(attempts):
        try:
            pod = await client.get(Pod, name, namespace=namespace)
        except ApiError as error:
            return None if error.status.code == 404 else error.status.message
        finalizers = list((pod.metadata.finalizers if pod.metadata else None) or ())
        if finalizer not in finalizers:
            return None
        patch = [
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "replace", "path": "/metadata/finalizers",
             "value": [f for f in finalizers if f != finalizer]},
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
