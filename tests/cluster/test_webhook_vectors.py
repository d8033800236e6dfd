"""The test vectors of admission.md §14, each pod created through the real API server, which
calls a controller replica's webhook through a MutatingWebhookConfiguration; the stored pod,
the TensorFusionWorkload and the owner are checked.

Three setups, one replica each: normal mode (objectSelector `enabled=true`; vectors 1, 2, 3, 6,
7, 8), progressive migration (no objectSelector; vectors 5 and 9) and auto-migration from the
dynamic configuration (no objectSelector; vector 4). Each test collects every mismatch of its
vectors into one failure message.

The helpers here (the leader's pod index read with `GET /api/assign-index?preview=true` and a
token of the controller's ServiceAccount, an AdmissionReview sent to the webhook directly over
HTTPS, the mismatch collector) are shared with `test_webhook_denials.py`.
"""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.apps_v1 import ReplicaSetSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import ReplicaSet
from lightkube.resources.core_v1 import Pod, Secret

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.domain.annotations import encode_index

from ..unit.admission.admission_builders import make_pod, native_container, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane, eventually
from .test_controller_process_alerts import service_account_token
from .webhook_setup import (
    PRIORITY_CLASSES,
    WEBHOOK_NAME,
    WebhookCluster,
    create_priority_classes,
    start_webhook,
)

pytestmark = pytest.mark.cluster

WORKLOAD: Any = resource_of("TensorFusionWorkload")
POD: Any = Pod
P = "tensor-fusion.ai/"
DENIED = f'admission webhook "{WEBHOOK_NAME}" denied the request: '
SCHEDULER = "tensor-fusion-scheduler"
FINALIZER = P + "finalizer"
TOLERATION = {"key": P + "used-by", "operator": "Equal", "value": "tensor-fusion",
              "effect": "PreferNoSchedule"}  # fmt: skip
SCHEDULER_PATCH = [{"op": "replace", "path": "/spec/schedulerName", "value": SCHEDULER}]
INDEX_PREFIX = P + "index_"


# --------------------------------------------------------------------------- shared helpers


class Mismatches:
    """Collects what differs from the spec, so that one run shows every failing case."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def equal(self, case: str, what: str, got: Any, want: Any) -> None:
        if got != want:
            self.items.append(f"[{case}] {what}:\n    expected {want!r}\n    got      {got!r}")

    def true(self, case: str, what: str, condition: bool, detail: Any = "") -> None:
        if not condition:
            self.items.append(f"[{case}] {what}" + (f": {detail!r}" if detail != "" else ""))

    def check(self) -> None:
        assert not self.items, f"{len(self.items)} mismatch(es):\n" + "\n".join(self.items)


IndexReader = Callable[[], Awaitable[int]]


async def pod_index_reader(
    kube: AsyncClient, cluster: WebhookCluster, namespace: str
) -> IndexReader:
    """Reads the leader's next pod index without taking it (`GET /api/assign-index?preview=true`)
    with a token of the controller's ServiceAccount (named after the release, as the chart
    does), made with the TokenRequest API; waits until the replica leads and answers."""
    token = await service_account_token(kube, namespace, cluster.release)
    headers = {"Authorization": f"Bearer {token}"}
    url = cluster.replica.url("/api/assign-index")
    answers: list[str] = []

    async def peek() -> int | None:
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, params={"podName": "test-probe", "preview": "true"},
                            headers=headers, timeout=aiohttp.ClientTimeout(5)) as reply,
            ):  # fmt: skip
                text = await reply.text()
        except aiohttp.ClientError as error:
            answers.append(repr(error))
            return None
        answers.append(f"HTTP {reply.status}: {text[:200]}")
        return int(text) if reply.status == 200 else None

    await eventually(peek, what="the leader's pod index (assign-index preview)",
                     components=[cluster.replica.component])  # fmt: skip

    async def read() -> int:
        value = await peek()
        assert value is not None, f"assign-index preview failed: {answers[-1:]}"
        return value

    return read


async def webhook_ca(kube: AsyncClient, namespace: str) -> ssl.SSLContext:
    """A client context trusting the CA of the webhook's Secret."""
    secret = await kube.get(Secret, "tensor-fusion-webhook-secret", namespace=namespace)
    assert secret.data is not None
    return ssl.create_default_context(cadata=base64.b64decode(secret.data["ca.crt"]).decode())


async def review_directly(
    cluster: WebhookCluster,
    context: ssl.SSLContext,
    pod: Mapping[str, Any],
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """POSTs an AdmissionReview for a pod CREATE to the replica's webhook; the `response`."""
    metadata = pod.get("metadata") or {}
    body = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": metadata.get("namespace", ""), "name": metadata.get("name", ""),
            "operation": "CREATE", "object": pod, "dryRun": dry_run,
            "userInfo": {"username": "tests"},
        },
    }  # fmt: skip
    url = f"https://{cluster.replica.ip}:{cluster.port}/mutate-v1-pod"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, ssl=context, timeout=aiohttp.ClientTimeout(15)) as reply,
    ):
        assert reply.status == 200, await reply.text()
        answer: dict[str, Any] = await reply.json()
    assert answer["response"]["uid"] == body["request"]["uid"]  # type: ignore[index]
    response: dict[str, Any] = answer["response"]
    return response


def decoded_patch(response: Mapping[str, Any]) -> Any:
    """The JSONPatch of an AdmissionReview response (None without one)."""
    if "patch" not in response:
        return None
    return json.loads(base64.b64decode(response["patch"]))


async def create_pod(kube: AsyncClient, pod: Mapping[str, Any]) -> dict[str, Any] | ApiError:
    """The stored pod as the API server returns it, or its refusal."""
    try:
        created = await kube.create(POD.from_dict(dict(pod)))
    except ApiError as error:
        return error
    stored: dict[str, Any] = created.to_dict()
    return stored


async def workload_names(kube: AsyncClient, namespace: str) -> list[str]:
    return sorted([w.metadata.name async for w in kube.list(WORKLOAD, namespace=namespace)])


def index_resources(container: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The index resources of a container, per side."""
    resources = container.get("resources") or {}
    return {side: {k: v for k, v in (resources.get(side) or {}).items()
                   if k.startswith(INDEX_PREFIX)} for side in ("requests", "limits")}  # fmt: skip


def expected_index(value: int) -> dict[str, dict[str, str]]:
    name, number = encode_index(value)
    return {"requests": {name: str(number)}, "limits": {name: str(number)}}


async def create_replica_set(
    kube: AsyncClient,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ReplicaSet with `replicas: 0` (kube-controller-manager makes no pods for it); the
    controller ownerReference of a pod it owns."""
    created = await kube.create(ReplicaSet(
        metadata=ObjectMeta(name=name, namespace=namespace, annotations=dict(annotations or {})),
        spec=ReplicaSetSpec(
            replicas=0, selector=LabelSelector(matchLabels=dict(labels)),
            template=PodTemplateSpec(metadata=ObjectMeta(labels=dict(labels)),
                                     spec=PodSpec(containers=[Container(name="c", image="x")])),
        ),
    ))  # fmt: skip
    assert created.metadata is not None
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
            "uid": created.metadata.uid, "controller": True}  # fmt: skip


async def replica_set_annotations(kube: AsyncClient, namespace: str, name: str) -> dict[str, str]:
    found = await kube.get(ReplicaSet, name, namespace=namespace)
    assert found.metadata is not None
    return dict(found.metadata.annotations or {})


def metadata_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = stored.get("metadata") or {}
    return metadata


def spec_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = stored.get("spec") or {}
    return spec


# --------------------------------------------------------------------------- normal mode


def check_untouched(
    found: Mismatches, case: str, stored: Mapping[str, Any], sent: Mapping[str, Any]
) -> None:
    """Admitted as sent: no TF label, annotation, scheduler, finalizer or index resource."""
    metadata, sent_metadata = metadata_of(stored), sent["metadata"]
    found.equal(case, "labels", metadata.get("labels") or {}, sent_metadata.get("labels") or {})
    found.equal(case, "annotations", metadata.get("annotations") or {},
                sent_metadata.get("annotations") or {})  # fmt: skip
    found.equal(case, "finalizers", metadata.get("finalizers"), None)
    spec = spec_of(stored)
    found.equal(case, "schedulerName", spec.get("schedulerName"), "default-scheduler")
    found.equal(case, "priorityClassName", spec.get("priorityClassName"), None)
    found.true(case, "no TF toleration", TOLERATION not in (spec.get("tolerations") or []),
               spec.get("tolerations"))  # fmt: skip
    for container in spec.get("containers") or []:
        found.equal(case, f"index resources of {container.get('name')}",
                    index_resources(container), {"requests": {}, "limits": {}})  # fmt: skip


async def test_vectors_in_normal_mode(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    """Vectors 1, 2, 3, 6, 7 and 8 of admission.md §14."""
    await create_priority_classes(kube, cluster_objects)
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects)
    pool = cluster.pool
    read_index = await pod_index_reader(kube, cluster, namespace)
    context = await webhook_ca(kube, namespace)
    found = Mismatches()

    # Vector 1: the typical TF pod.
    case = "vector 1"
    index = await read_index()
    sent = make_pod(resources_ok(), name="v1-pod", namespace=namespace)
    stored = await create_pod(kube, sent)
    if isinstance(stored, ApiError):
        found.true(case, "allowed", False, str(stored.status.message))
    else:
        metadata, spec = metadata_of(stored), spec_of(stored)
        labels = metadata.get("labels") or {}
        found.equal(case, "labels",
                    {k: v for k, v in labels.items() if k != P + "pod-template-hash"},
                    {P + "enabled": "true", P + "component": "worker", P + "gpupool": pool,
                     P + "workload": "v1-pod"})  # fmt: skip
        found.true(case, "label pod-template-hash set", bool(labels.get(P + "pod-template-hash")),
                   labels)  # fmt: skip
        found.equal(case, "annotations", metadata.get("annotations"), {
            P + "gpupool": pool, P + "gpu-count": "1", P + "qos": "medium",
            P + "isolation": "soft", P + "is-local-gpu": "true", P + "sidecar-worker": "false",
            P + "inject-container": "app", P + "tflops-request": "10", P + "tflops-limit": "20",
            P + "vram-request": "4Gi", P + "vram-limit": "4Gi",
            P + "pending-owned-workload": "v1-pod",
        })  # fmt: skip
        found.equal(case, "finalizers", metadata.get("finalizers"), [FINALIZER])
        found.equal(case, "schedulerName", spec.get("schedulerName"), SCHEDULER)
        tolerations = spec.get("tolerations") or []
        found.true(case, "toleration used-by=tensor-fusion:PreferNoSchedule",
                   TOLERATION in tolerations, tolerations)  # fmt: skip
        found.equal(case, "priorityClassName", spec.get("priorityClassName"), None)
        containers = spec.get("containers") or []
        found.equal(case, "containers (no limiter injected)",
                    [c.get("name") for c in containers], ["app"])  # fmt: skip
        found.equal(case, "container env (no LD_PRELOAD)", containers[0].get("env"), None)
        found.equal(case, "index resource (the leader's next index)",
                    index_resources(containers[0]), expected_index(index))  # fmt: skip
        found.equal(case, "the leader's pod index taken", await read_index(), index % 128 + 1)
        try:
            workload = (await kube.get(WORKLOAD, "v1-pod", namespace=namespace)).to_dict()
        except ApiError as error:
            found.true(case, "workload v1-pod created", False, str(error.status.message))
        else:
            w_meta, w_spec = workload["metadata"], workload["spec"]
            w_annotations, w_labels = w_meta.get("annotations") or {}, w_meta.get("labels") or {}
            found.equal(case, "workload annotation workload-mode",
                        w_annotations.get(P + "workload-mode"), "dynamic")  # fmt: skip
            found.equal(case, "workload label gpupool", w_labels.get(P + "gpupool"), pool)
            found.equal(case, "workload spec", {k: w_spec.get(k) for k in (
                "poolName", "qos", "isolation", "isLocalGPU", "sidecarWorker", "gpuCount")},
                {"poolName": pool, "qos": "medium", "isolation": "soft", "isLocalGPU": True,
                 "sidecarWorker": False, "gpuCount": 1})  # fmt: skip
            found.equal(case, "workload resources", w_spec.get("resources"),
                        {"requests": {"tflops": "10", "vram": "4Gi"},
                         "limits": {"tflops": "20", "vram": "4Gi"}})  # fmt: skip

    # Vector 2: limits only → equal requests → qos high, its priority class, priority recomputed.
    case = "vector 2"
    index = await read_index()
    sent = make_pod({"tflops-limit": "20", "vram-limit": "8Gi"}, name="v2-pod",
                    namespace=namespace)  # fmt: skip
    stored = await create_pod(kube, sent)
    if isinstance(stored, ApiError):
        found.true(case, "allowed", False, str(stored.status.message))
    else:
        annotations = metadata_of(stored).get("annotations") or {}
        found.equal(case, "annotations", {k: annotations.get(P + k) for k in (
            "tflops-request", "tflops-limit", "vram-request", "vram-limit", "qos")},
            {"tflops-request": "20", "tflops-limit": "20", "vram-request": "8Gi",
             "vram-limit": "8Gi", "qos": "high"})  # fmt: skip
        spec = spec_of(stored)
        found.equal(case, "priorityClassName", spec.get("priorityClassName"), "tensor-fusion-high")
        # admission.md §6 / api.md §7: spec.priority is removed so that the API server
        # recomputes it from the class.
        found.equal(case, "spec.priority (recomputed from the class)", spec.get("priority"),
                    PRIORITY_CLASSES["tensor-fusion-high"])  # fmt: skip
        found.equal(case, "index resource", index_resources((spec.get("containers") or [{}])[0]),
                    expected_index(index))  # fmt: skip
    # The webhook's own patch removes a submitted spec.priority (dry run: nothing written).
    with_priority = make_pod({"tflops-limit": "20", "vram-limit": "8Gi"}, name="v2-direct",
                             namespace=namespace, spec={"priority": 0})  # fmt: skip
    response = await review_directly(cluster, context, with_priority, dry_run=True)
    patch = decoded_patch(response) or []
    found.true(case, "direct review allowed", response.get("allowed") is True, response)
    found.true(case, "patch removes /spec/priority",
               {"op": "remove", "path": "/spec/priority"} in patch, patch)  # fmt: skip

    # Vector 3: gpu-count 0 → 400, no workload.
    case = "vector 3"
    before = await workload_names(kube, namespace)
    sent = make_pod(resources_ok(**{"gpu-count": "0"}), name="v3-pod", namespace=namespace)
    stored = await create_pod(kube, sent)
    if not isinstance(stored, ApiError):
        found.true(case, "denied", False, metadata_of(stored).get("annotations"))
    else:
        found.equal(case, "code", stored.status.code, 400)
        found.equal(case, "message", stored.status.message, DENIED + (
            f'{P}gpu-count: invalid value "0": must be an integer between 1 and 128'))  # fmt: skip
    found.equal(case, "workloads afterwards", await workload_names(kube, namespace), before)

    # Vector 6: the ReplicaSet's counter has reached enabled-replicas → admitted untouched.
    case = "vector 6"
    rs_labels = {"app": "rs-a", "pod-template-hash": "abc"}
    owner = await create_replica_set(kube, namespace, "rs-a", rs_labels,
                                     {P + "tf-counter-abc": "1"})  # fmt: skip
    before = await workload_names(kube, namespace)
    sent = make_pod(resources_ok(**{"enabled-replicas": "1"}), name="v6-pod",
                    namespace=namespace, labels=rs_labels, owner=owner)  # fmt: skip
    stored = await create_pod(kube, sent)
    if isinstance(stored, ApiError):
        found.true(case, "allowed", False, str(stored.status.message))
    else:
        check_untouched(found, case, stored, sent)
    found.equal(case, "workloads afterwards", await workload_names(kube, namespace), before)
    found.equal(case, "owner annotations", await replica_set_annotations(kube, namespace, "rs-a"),
                {P + "tf-counter-abc": "1"})  # fmt: skip

    # Vector 7: enabled-replicas 0 without owner → admitted untouched.
    case = "vector 7"
    before = await workload_names(kube, namespace)
    sent = make_pod(resources_ok(**{"enabled-replicas": "0"}), name="v7-pod", namespace=namespace)
    stored = await create_pod(kube, sent)
    if isinstance(stored, ApiError):
        found.true(case, "allowed", False, str(stored.status.message))
    else:
        check_untouched(found, case, stored, sent)
    found.equal(case, "workloads afterwards", await workload_names(kube, namespace), before)

    # Vector 8: remote vGPU → 400.
    case = "vector 8"
    before = await workload_names(kube, namespace)
    sent = make_pod(resources_ok(**{"is-local-gpu": "false"}), name="v8-pod", namespace=namespace)
    stored = await create_pod(kube, sent)
    if not isinstance(stored, ApiError):
        found.true(case, "denied", False, metadata_of(stored).get("annotations"))
    else:
        found.equal(case, "code", stored.status.code, 400)
        found.equal(case, "message", stored.status.message, DENIED + (
            f'{P}is-local-gpu: invalid value "false": remote vGPU is not supported by this '
            "version"))  # fmt: skip
    found.equal(case, "workloads afterwards", await workload_names(kube, namespace), before)
    found.check()


# --------------------------------------------------------------------------- migration modes


def native_pod(
    name: str, namespace: str, *, enabled: bool | None, scheduler: str
) -> dict[str, Any]:
    """A pod with `nvidia.com/gpu: 1` (no projected token volume, whose name is random)."""
    return make_pod(None, name=name, namespace=namespace, enabled=enabled,
                    containers=[native_container("app", 1)],
                    spec={"schedulerName": scheduler,
                          "automountServiceAccountToken": False})  # fmt: skip


async def test_progressive_migration_patches_only_the_scheduler(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    """Vectors 5 (unlabelled) and 9 (labelled `enabled: "false"`): the stored pod differs from
    a twin that already names our scheduler (which the webhook leaves alone) only by name, and
    from what was sent only by schedulerName; the webhook's patch is exactly the replace."""
    cluster = await start_webhook(
        control_plane, kube, namespace, replicas, cluster_objects, migration=True,
        env={"NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION": "true"},
    )  # fmt: skip
    context = await webhook_ca(kube, namespace)
    found = Mismatches()
    for case, enabled in (("vector 5", None), ("vector 9", False)):
        stem = case.replace(" ", "")
        sent = native_pod(f"{stem}-pod", namespace, enabled=enabled, scheduler="default-scheduler")
        twin = native_pod(f"{stem}-twin", namespace, enabled=enabled, scheduler=SCHEDULER)
        response = await review_directly(cluster, context, sent)
        found.true(case, "direct review allowed", response.get("allowed") is True, response)
        found.equal(case, "patch of the direct review", decoded_patch(response), SCHEDULER_PATCH)
        stored, stored_twin = await create_pod(kube, sent), await create_pod(kube, twin)
        if isinstance(stored, ApiError) or isinstance(stored_twin, ApiError):
            refused = stored if isinstance(stored, ApiError) else stored_twin
            assert isinstance(refused, ApiError)
            found.true(case, "allowed", False, str(refused.status.message))
            continue
        metadata = metadata_of(stored)
        found.equal(case, "labels", metadata.get("labels") or {},
                    sent["metadata"].get("labels") or {})  # fmt: skip
        found.equal(case, "annotations", metadata.get("annotations") or {},
                    sent["metadata"].get("annotations") or {})  # fmt: skip
        found.equal(case, "finalizers", metadata.get("finalizers"), None)
        found.equal(case, "schedulerName", spec_of(stored).get("schedulerName"), SCHEDULER)
        found.equal(case, "stored spec (the twin's, defaults included)", spec_of(stored),
                    spec_of(stored_twin))  # fmt: skip
    found.equal("vectors 5, 9", "workloads", await workload_names(kube, namespace), [])
    found.check()


async def test_auto_migration_turns_a_native_pod_into_a_shared_tf_pod(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    """Vector 4: with `autoMigration: {enable: true}` in the dynamic configuration, an
    unlabelled pod with `nvidia.com/gpu: 2` becomes a `shared` TF pod."""
    config = tmp_path / "config.yaml"
    config.write_text("autoMigration:\n  enable: true\n")
    cluster = await start_webhook(
        control_plane, kube, namespace, replicas, cluster_objects, migration=True,
        flags=("-dynamic-config", str(config)),
    )  # fmt: skip
    read_index = await pod_index_reader(kube, cluster, namespace)
    sent = make_pod(None, name="v4-pod", namespace=namespace, enabled=None,
                    containers=[native_container("train", 2)])  # fmt: skip
    seen: list[Any] = []

    async def migrated() -> bool:
        """A server-side dry run (no writes) shows the migration once the config is read."""
        dry = await kube.create(POD.from_dict(sent), dry_run=True)
        seen.append(dry.metadata.labels if dry.metadata else None)
        return bool(dry.metadata and (dry.metadata.labels or {}).get(P + "enabled") == "true")

    try:
        await eventually(migrated, what="auto-migration of a dry-run pod (autoMigration.enable "
                         "from -dynamic-config)", timeout=30,
                         components=[cluster.replica.component])  # fmt: skip
    except AssertionError as error:
        context = await webhook_ca(kube, namespace)
        answer = await review_directly(cluster, context, sent, dry_run=True)
        raise AssertionError(f"{error}\nlabels of the dry-run pods: {seen[-1:]}\n"
                             f"the webhook's answer to the pod (dry run): {answer}, "
                             f"patch {decoded_patch(answer)}") from None  # fmt: skip
    index = await read_index()
    created = await create_pod(kube, sent)
    assert not isinstance(created, ApiError), created.status.message
    found, case = Mismatches(), "vector 4"
    metadata, spec = metadata_of(created), spec_of(created)
    found.equal(case, "label enabled", (metadata.get("labels") or {}).get(P + "enabled"), "true")
    annotations = metadata.get("annotations") or {}
    found.equal(case, "annotations", {k: annotations.get(P + k) for k in (
        "isolation", "gpu-count", "container-gpu-count", "vendor", "inject-container",
        "is-local-gpu", "sidecar-worker")},
        {"isolation": "shared", "gpu-count": "2", "container-gpu-count": '{"train":2}',
         "vendor": "NVIDIA", "inject-container": "train", "is-local-gpu": "true",
         "sidecar-worker": "false"})  # fmt: skip
    found.equal(case, "no resource annotations (none required for shared)", sorted(
        k for k in annotations if k.startswith((P + "tflops-", P + "vram-", P + "compute-"))),
        [])  # fmt: skip
    found.equal(case, "schedulerName", spec.get("schedulerName"), SCHEDULER)
    found.equal(case, "finalizers", metadata.get("finalizers"), [FINALIZER])
    [container] = spec.get("containers") or [{}]
    resources = container.get("resources") or {}
    found.equal(case, "native resource removed",
                [k for side in ("requests", "limits") for k in (resources.get(side) or {})
                 if k == "nvidia.com/gpu"], [])  # fmt: skip
    found.equal(case, "index resource", index_resources(container), expected_index(index))
    try:
        workload = (await kube.get(WORKLOAD, "v4-pod", namespace=namespace)).to_dict()
    except ApiError as error:
        found.true(case, "workload v4-pod created", False, str(error.status.message))
    else:
        w_spec = workload["spec"]
        found.equal(case, "workload spec", {k: w_spec.get(k) for k in (
            "isolation", "gpuCount", "vendor")}, {"isolation": "shared", "gpuCount": 2,
                                                   "vendor": "NVIDIA"})  # fmt: skip
        found.equal(case, "workload annotations", workload["metadata"].get("annotations"),
                    {P + "workload-mode": "dynamic",
                     P + "container-gpu-count": '{"train":2}'})  # fmt: skip
    found.check()
