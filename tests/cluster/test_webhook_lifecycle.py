"""What happens around admission, on the real control plane: an ownerless pod becomes its
workload's owner (the garbage collector then deletes the workload with the pod); a pod that a
ValidatingAdmissionPolicy rejects after the webhook counted it leaves an increment that the
recount removes, after the deleted counted pod was counted down before its finalizer went; a
cert-manager-layout Secret put in place of the controller's is served without a restart."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from lightkube import ApiError, AsyncClient
from lightkube.models.apps_v1 import StatefulSetSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Pod, Secret

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.tls.webhook_certificates import issue
from tensorfusion.domain.annotations import KEYS

from ..unit.admission.admission_builders import make_pod, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Replica, Start
from .controlplane import ControlPlane, eventually
from .webhook_setup import start_webhook

pytestmark = pytest.mark.cluster

WORKLOAD: Any = resource_of("TensorFusionWorkload")
POD: Any = Pod
COUNTER = "tensor-fusion.ai/tf-counter-abc"
REJECTED = "rejected by the test policy"

POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  validations:
  - expression: "!has(object.metadata.labels) || !('tf-test-reject' in object.metadata.labels)"
    message: "{message}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {namespace}}}
"""


async def read_or_none(kube: AsyncClient, resource: Any, name: str, namespace: str) -> Any:
    try:
        return await kube.get(resource, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise


async def counter(kube: AsyncClient, namespace: str) -> str | None:
    owner = await kube.get(StatefulSet, "db", namespace=namespace)
    assert owner.metadata is not None
    value: str | None = (owner.metadata.annotations or {}).get(COUNTER)
    return value


async def test_ownerless_pods_own_their_workload_and_the_recount_heals_a_rejected_pod(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects)
    logs = [cluster.replica.component]

    # An ownerless pod: the leader makes it the owner of its workload.
    solo = await kube.create(POD.from_dict(make_pod(resources_ok(gpupool=cluster.pool),
                                                    name="solo", namespace=namespace)))  # fmt: skip
    assert solo.metadata is not None and solo.metadata.labels is not None
    workload_name = solo.metadata.labels[KEYS.workload]
    uid = solo.metadata.uid
    assert (solo.metadata.annotations or {})[KEYS.pending_owned_workload] == workload_name

    async def owned() -> bool:
        workload = await kube.get(WORKLOAD, workload_name, namespace=namespace)
        pod = await kube.get(POD, "solo", namespace=namespace)
        refs = [(r["kind"], r["name"], r["uid"], r.get("controller"))
                for r in workload.to_dict()["metadata"].get("ownerReferences") or []]  # fmt: skip
        settled = KEYS.pending_owned_workload not in (pod.metadata.annotations or {})
        return refs == [("Pod", "solo", uid, True)] and settled

    await eventually(owned, what="the pod owning its workload", components=logs)
    await kube.delete(POD, "solo", namespace=namespace, grace_period=0)

    async def workload_gone() -> bool:
        return await read_or_none(kube, WORKLOAD, workload_name, namespace) is None

    await eventually(workload_gone, what="the workload deleted with its pod", components=logs)

    # A policy that rejects pods after the webhook has answered.
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(name=f"{cluster.release}-reject", message=REJECTED,
                                    namespace=namespace))  # fmt: skip
    await control_plane.kubectl("apply", "-f", str(policy))
    cluster_objects(ValidatingAdmissionPolicy, f"{cluster.release}-reject")
    cluster_objects(ValidatingAdmissionPolicyBinding, f"{cluster.release}-reject")
    probe = 0

    async def policy_rejects() -> bool:
        nonlocal probe
        probe += 1
        pod = make_pod(name=f"probe-{probe}", namespace=namespace, enabled=None,
                       labels={"tf-test-reject": "yes"})  # fmt: skip
        try:
            await kube.create(POD.from_dict(pod))
        except ApiError as error:
            return REJECTED in str(error.status.message)
        await kube.delete(POD, f"probe-{probe}", namespace=namespace, grace_period=0)
        return False

    await eventually(policy_rejects, what="the policy in force", components=logs)

    labels = {"app": "db"}
    owner = await kube.create(StatefulSet(
        metadata=ObjectMeta(name="db", namespace=namespace),
        spec=StatefulSetSpec(
            replicas=0, serviceName="db", selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(metadata=ObjectMeta(labels=labels),
                                     spec=PodSpec(containers=[Container(name="c", image="x")])),
        ),
    ))  # fmt: skip
    assert owner.metadata is not None
    ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
           "uid": owner.metadata.uid, "controller": True}  # fmt: skip

    def member(name: str, **extra_labels: str) -> Any:
        return POD.from_dict(make_pod(
            resources_ok(gpupool=cluster.pool, **{"enabled-replicas": "3"}), name=name,
            namespace=namespace, owner=ref,
            labels={**labels, "pod-template-hash": "abc", **extra_labels},
        ))  # fmt: skip

    counted = await kube.create(member("db-0"))
    assert counted.metadata is not None
    assert (counted.metadata.labels or {})[KEYS.component] == "worker"
    with pytest.raises(ApiError) as refused:
        await kube.create(member("db-1", **{"tf-test-reject": "yes"}))
    assert REJECTED in str(refused.value.status.message)
    assert await counter(kube, namespace) == "2", "the webhook counted the rejected pod"

    await kube.delete(POD, "db-0", namespace=namespace, grace_period=0)

    async def gone() -> bool:
        return await read_or_none(kube, POD, "db-0", namespace) is None

    await eventually(gone, what="the counted pod's finalizer removed", components=logs)
    assert await counter(kube, namespace) == "1", "counted down before the finalizer went"

    async def healed() -> bool:
        return await counter(kube, namespace) is None

    # The recount after the decrement lowers once the owner stood still for 30 s.
    await eventually(healed, what="the recount removing the rejected pod's increment",
                     timeout=120, components=logs)  # fmt: skip


async def served_certificate(replica: Replica, port: int) -> bytes:
    pem = await asyncio.to_thread(ssl.get_server_certificate, (replica.ip, port))
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(Encoding.DER)


async def test_a_cert_manager_secret_put_in_place_is_served_without_restart(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects,
                                  count=2)  # fmt: skip
    secret = await kube.get(Secret, "tensor-fusion-webhook-secret", namespace=namespace)
    assert secret.data is not None
    found = await kube.get(MutatingWebhookConfiguration, cluster.configuration)
    assert (found.webhooks or [])[0].clientConfig.caBundle == secret.data["ca.crt"]
    first = [await served_certificate(r, cluster.port) for r in cluster.replicas]
    assert first[0] == first[1], "two replicas serve the one certificate they raced to create"

    now = datetime.datetime.now(datetime.UTC)
    hosts = [r.ip for r in cluster.replicas]
    theirs = issue(f"{cluster.release}-webhook", namespace, now, extra_hosts=hosts)
    assert theirs.ca_pem is not None
    data = {"tls.crt": theirs.cert_pem, "tls.key": theirs.key_pem, "ca.crt": theirs.ca_pem}
    assert secret.metadata is not None
    await kube.replace(Secret(
        metadata=ObjectMeta(name="tensor-fusion-webhook-secret", namespace=namespace,
                            resourceVersion=secret.metadata.resourceVersion),
        type="kubernetes.io/tls",
        data={k: base64.b64encode(v).decode() for k, v in data.items()},
    ))  # fmt: skip
    wanted_der = x509.load_pem_x509_certificate(theirs.cert_pem).public_bytes(Encoding.DER)

    async def served() -> bool:
        certificates = [await served_certificate(r, cluster.port) for r in cluster.replicas]
        configuration = await kube.get(MutatingWebhookConfiguration, cluster.configuration)
        bundle = (configuration.webhooks or [])[0].clientConfig.caBundle
        return all(c == wanted_der for c in certificates) and bundle == base64.b64encode(
            theirs.ca_pem or b"").decode()  # fmt: skip

    await eventually(served, what="the new certificate served and its CA in the caBundle",
                     timeout=90, components=[r.component for r in cluster.replicas])  # fmt: skip
    pod = make_pod(resources_ok(gpupool=cluster.pool), name="after", namespace=namespace)
    created = await kube.create(POD.from_dict(pod))
    assert created.spec is not None and created.spec.schedulerName == "tensor-fusion-scheduler"
