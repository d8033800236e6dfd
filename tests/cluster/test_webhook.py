"""The pod webhook served by a controller replica, called by the real API server through a
MutatingWebhookConfiguration whose caBundle the controller sets from the certificate it issued:
a TensorFusion pod is created mutated (scheduler, labels, finalizer, workload), a bad
annotation is refused with its message, and /readyz waited for the certificate."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Pod, Secret

from tensorfusion.adapters.kube.custom_resources import resource_of

from ..unit.admission.admission_builders import make_pod, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane
from .webhook_setup import start_webhook

pytestmark = pytest.mark.cluster

WORKLOAD: Any = resource_of("TensorFusionWorkload")
POD: Any = Pod


async def test_the_api_server_calls_the_controllers_webhook(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects)
    secret = await kube.get(Secret, "tensor-fusion-webhook-secret", namespace=namespace)
    found = await kube.get(MutatingWebhookConfiguration, cluster.configuration)
    assert secret.data is not None
    assert (found.webhooks or [])[0].clientConfig.caBundle == secret.data["ca.crt"]

    pod = make_pod(resources_ok(gpupool=cluster.pool), name="tf-pod", namespace=namespace)
    created = await kube.create(POD.from_dict(pod))
    assert created.spec is not None and created.metadata is not None
    assert created.spec.schedulerName == "tensor-fusion-scheduler"
    assert created.metadata.labels is not None
    assert created.metadata.labels["tensor-fusion.ai/component"] == "worker"
    assert "tensor-fusion.ai/finalizer" in (created.metadata.finalizers or [])
    workloads = [w async for w in kube.list(WORKLOAD, namespace=namespace)]
    assert len(workloads) == 1

    bad = make_pod(resources_ok(**{"vram-request": "3Gx"}), name="bad-pod", namespace=namespace)
    with pytest.raises(ApiError) as refused:
        await kube.create(POD.from_dict(bad))
    assert refused.value.status.code == 400
    assert 'tensor-fusion.ai/vram-request: invalid value "3Gx": not a quantity' in str(
        refused.value.status.message)  # fmt: skip
