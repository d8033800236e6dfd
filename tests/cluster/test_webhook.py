"""The pod webhook served by a controller replica, called by the real API server through a
MutatingWebhookConfiguration whose caBundle the controller sets from the certificate it issued:
a TensorFusion pod is created mutated (scheduler, labels, finalizer, workload), a bad
annotation is refused with its message, and /readyz waited for the certificate."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Pod, Secret

from tensorfusion.adapters.kube.custom_resources import resource_of

from ..unit.admission.admission_builders import make_pod, make_pool, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Start, install_crds
from .controlplane import ControlPlane, eventually, free_port

pytestmark = pytest.mark.cluster

POOL: Any = resource_of("GPUPool")
WORKLOAD: Any = resource_of("TensorFusionWorkload")
POD: Any = Pod


async def test_the_api_server_calls_the_controllers_webhook(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    await install_crds(control_plane)
    release = f"tf-{secrets.token_hex(3)}"
    pool = make_pool(f"{release}-shared")
    await kube.create(POOL.from_dict(pool))
    cluster_objects(POOL, pool["metadata"]["name"])
    port = free_port()
    replica = replicas("replica-w", env={"TF_RELEASE_FULLNAME": release,
                                         "WEBHOOK_PORT": str(port),
                                         "WEBHOOK_CERT_EXTRA_HOSTS": "127.0.0.2"})  # fmt: skip
    configuration = f"{release}-mutating-webhook"
    await kube.create(MutatingWebhookConfiguration(
        metadata=ObjectMeta(name=configuration),
        webhooks=[MutatingWebhook(
            name="mutate.tensor-fusion.ai", admissionReviewVersions=["v1"],
            sideEffects="NoneOnDryRun", failurePolicy="Fail",
            clientConfig=WebhookClientConfig(url=f"https://127.0.0.2:{port}/mutate-v1-pod"),
            objectSelector=LabelSelector(matchLabels={"tensor-fusion.ai/enabled": "true"}),
            namespaceSelector=LabelSelector(
                matchLabels={"kubernetes.io/metadata.name": namespace}),
            rules=[RuleWithOperations(apiGroups=[""], apiVersions=["v1"], operations=["CREATE"],
                                      resources=["pods"])],
        )],
    ))  # fmt: skip
    cluster_objects(MutatingWebhookConfiguration, configuration)

    async def ca_set() -> bool:
        found = await kube.get(MutatingWebhookConfiguration, configuration)
        return bool((found.webhooks or [])[0].clientConfig.caBundle)

    await eventually(ca_set, what="the caBundle set by the controller",
                     components=[replica.component])  # fmt: skip
    secret = await kube.get(Secret, "tensor-fusion-webhook-secret", namespace=namespace)
    found = await kube.get(MutatingWebhookConfiguration, configuration)
    assert secret.data is not None
    assert (found.webhooks or [])[0].clientConfig.caBundle == secret.data["ca.crt"]
    code, _ = await replica.get("/readyz", health=True)
    assert code == 200

    pod = make_pod(resources_ok(gpupool=f"{release}-shared"), name="tf-pod", namespace=namespace)
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
