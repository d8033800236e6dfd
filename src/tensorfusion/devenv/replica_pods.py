"""Pod objects for replicas run as local processes, where there is no kubelet.

Followers find the leader through the Lease's holder and that Pod's `status.podIP`; a replica
started by `ChartControllers` or the cluster tests has no Pod of its own, so the harness makes
one, as a kubelet would report it: Running and Ready, with the replica's loopback address as
its IP. The chart's Alertmanagers get theirs too (named and labelled as their StatefulSet's),
so `kubectl get pods` shows what the guide's Verify section expects. A stand-in names no node
and a scheduler that does not exist, so nothing schedules, binds or evicts it.
`release_ca_file` hands agents run as local processes the release CA their pods would mount.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Mapping
from pathlib import Path

from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, Secret
from lightkube.types import PatchType

from tensorfusion.domain.timestamps import format_rfc3339

__all__ = ["STAND_IN_LABEL", "release_ca_file", "stand_in_pod"]

STAND_IN_LABEL = "tensor-fusion.ai/stand-in"
"""Set to `controller-replica` on every Pod made here."""


async def stand_in_pod(
    kube: AsyncClient,
    *,
    namespace: str,
    name: str,
    ip: str,
    service_account: str,
    labels: Mapping[str, str] | None = None,
    container: str = "controller",
    role: str = "controller-replica",
) -> None:
    """Create (or keep) the Pod `name` of a replica and report it Running and Ready at `ip`;
    `labels` join the stand-in label (set to `role`)."""
    pod = Pod(
        metadata=ObjectMeta(name=name, namespace=namespace,
                            labels={**(labels or {}), STAND_IN_LABEL: role}),
        spec=PodSpec(serviceAccountName=service_account, schedulerName="no-scheduler",
                     automountServiceAccountToken=False,
                     containers=[Container(name=container, image="local-process")]),
    )  # fmt: skip
    try:
        await kube.create(pod)
    except ApiError as error:
        if error.status.code != 409:
            raise
    now = format_rfc3339(time.time())
    status = {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
        "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}
                       for kind in ("Initialized", "ContainersReady", "Ready")],
        "containerStatuses": [{"name": container, "image": "local-process", "imageID": "",
                               "ready": True, "started": True, "restartCount": 0,
                               "state": {"running": {"startedAt": now}}}],
    }  # fmt: skip
    await kube.patch(Pod.Status, name, {"status": status}, namespace=namespace,
                     patch_type=PatchType.STRATEGIC)  # fmt: skip


async def release_ca_file(
    kube: AsyncClient, *, namespace: str, secret: str, path: Path, timeout_s: float = 60.0
) -> Path:
    """Write `ca.crt` of the release certificate's Secret to `path` (as the agent pods mount
    it), once a controller replica has issued it."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ApiError):
            found = await kube.get(Secret, secret, namespace=namespace)
            encoded = (found.data or {}).get("ca.crt")
            if encoded:
                path.write_bytes(base64.b64decode(encoded))
                return path
        if time.monotonic() > deadline:
            raise TimeoutError(f"Secret {namespace}/{secret} has no ca.crt after {timeout_s:g} s")
        await asyncio.sleep(0.2)
