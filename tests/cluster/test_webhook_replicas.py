"""The `enabled-replicas` partial rollout of the production guide (step 5) end to end:
kube-controller-manager creates a Deployment's pods through the real API server, which calls
the controller's webhook through a real MutatingWebhookConfiguration (admission.md §3, §4, §8).

- The guide's Deployment with `enabled-replicas: "3"` of 10: exactly 3 TensorFusion pods and 7
  native ones, the ReplicaSet counting 3; deleted pods are recreated and the split stays; raising
  the number, removing the annotation, and both rollbacks (`"0"`, label `"false"`).
- Step 8's requests and limits: 100/200 TFLOPS accepted with QoS medium, equal requests and
  limits give QoS high and its priority class; a server-side dry run writes nothing.
- Two replicas behind a round-robin proxy both admit, and still count exactly N.

There is no kubelet: pods stay Pending, are never Ready, and are deleted with grace period 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.devenv.tcp_proxy import round_robin_proxy

from ..unit.admission.admission_builders import make_pod, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Replica, Start, holder
from .controlplane import Component, ControlPlane, eventually
from .webhook_setup import PRIORITY_CLASSES, WebhookCluster, create_priority_classes, start_webhook

pytestmark = pytest.mark.cluster

P = "tensor-fusion.ai/"
ENABLED = P + "enabled"
ENABLED_REPLICAS = P + "enabled-replicas"
COUNTER_PREFIX = P + "tf-counter-"
POD_COUNTER_KEY = P + "pod-counter-key"
FINALIZER = P + "finalizer"
TF_SCHEDULER = "tensor-fusion-scheduler"
GPU = "nvidia.com/gpu"
REVISION = "deployment.kubernetes.io/revision"
#: Rollouts of 10 pods, each admitted by the webhook and removed through the leader's
#: finalizer, on 2 busy cores.
ROLLOUT_S = 120.0
#: As the chart runs the controller: one leader among the replicas, holding the Lease.
LEADER_ELECT = ("-leader-elect",)

WORKLOAD: Any = resource_of("TensorFusionWorkload")
POD: Any = Pod
DEPLOYMENT: Any = Deployment
REPLICA_SET: Any = ReplicaSet

#: The rollback example's container: it keeps `nvidia.com/gpu` during the migration.
PYTHON = {"name": "python", "image": "python:3.12", "resources": {"limits": {GPU: "1"}}}
#: api.md §7; installed with the product, so created by the test.


# --------------------------------------------------------------------------- objects


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def counters(obj: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in annotations_of(obj).items() if k.startswith(COUNTER_PREFIX)}


def is_tf(pod: Mapping[str, Any]) -> bool:
    """A TensorFusion pod: the webhook's worker label and scheduler."""
    return (
        labels_of(pod).get(P + "component") == "worker"
        and pod["spec"].get("schedulerName") == TF_SCHEDULER
    )


def guide_deployment(
    name: str,
    namespace: str,
    *,
    replicas: int,
    annotations: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] = (PYTHON,),
) -> dict[str, Any]:
    """The guide's Deployment: pod template labelled `tensor-fusion.ai/enabled: "true"`."""
    template_meta: dict[str, Any] = {"labels": {"app": name, ENABLED: "true"}}
    if annotations:
        template_meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            # No kubelet, so no pod ever becomes Ready: a RollingUpdate is paced by available
            # pods (maxSurge / maxUnavailable) and would crawl or stall. Recreate waits for no
            # availability: it scales the old ReplicaSet to 0, waits until its pods are gone
            # (TF pods go once the leader removed their finalizer), then creates the new
            # ReplicaSet at full size, so each rollout ends with one ReplicaSet's pods only.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": template_meta, "spec": {"containers": list(containers)}},
        },
    }


@dataclass
class Rollout:
    """The Deployment's current ReplicaSet (read after its pods) and its live pods."""

    replica_set: dict[str, Any]
    pods: list[dict[str, Any]]
    tf: list[dict[str, Any]] = field(init=False)
    native: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.tf = [p for p in self.pods if is_tf(p)]
        self.native = [p for p in self.pods if not is_tf(p)]

    @property
    def name(self) -> str:
        return str(meta(self.replica_set)["name"])

    @property
    def uid(self) -> str:
        return str(meta(self.replica_set)["uid"])

    @property
    def counter_key(self) -> str:
        return COUNTER_PREFIX + labels_of(self.replica_set)["pod-template-hash"]

    @property
    def counters(self) -> dict[str, str]:
        return counters(self.replica_set)

    def summary(self) -> str:
        return (
            f"ReplicaSet {self.name}: {len(self.tf)} TF pods, {len(self.native)} native, "
            f"counters {self.counters}"
        )


async def rolled_out(
    kube: AsyncClient,
    namespace: str,
    name: str,
    replicas: int,
    components: Sequence[Component],
    *,
    not_uid: str = "",
) -> Rollout:
    """Waits until the Deployment's current ReplicaSet (not `not_uid`) owns exactly `replicas`
    live pods and no other pod of the Deployment exists, deleting ones included."""

    async def check() -> Rollout | None:
        deployment = (await kube.get(DEPLOYMENT, name, namespace=namespace)).to_dict()
        status = deployment.get("status") or {}
        if status.get("observedGeneration", 0) < meta(deployment)["generation"]:
            return None
        revision = annotations_of(deployment).get(REVISION)
        sets = [rs.to_dict() async for rs in kube.list(
            REPLICA_SET, namespace=namespace, labels={"app": name})]  # fmt: skip
        current = [rs for rs in sets if annotations_of(rs).get(REVISION) == revision]
        if len(current) != 1 or meta(current[0])["uid"] == not_uid:
            return None
        pods = [p.to_dict() async for p in kube.list(
            POD, namespace=namespace, labels={"app": name})]  # fmt: skip
        if len(pods) != replicas:
            return None
        for pod in pods:
            owners = meta(pod).get("ownerReferences") or []
            if meta(pod).get("deletionTimestamp") or [o["uid"] for o in owners] != [
                meta(current[0])["uid"]
            ]:
                return None
        # Read after the pods: every increment precedes its pod, every decrement the removal
        # of its pod's finalizer, so the counter seen here accounts for all of these pods.
        fresh = await kube.get(REPLICA_SET, meta(current[0])["name"], namespace=namespace)
        return Rollout(fresh.to_dict(), pods)

    what = f"Deployment {name}: {replicas} live pods of one new ReplicaSet, no other pod"
    return await eventually(check, what=what, timeout=ROLLOUT_S, components=components)


def check_tf_pod(pod: Mapping[str, Any], counter_key: str | None) -> None:
    """A pod the webhook mutated (§11): scheduler, worker label, finalizer, native GPU gone."""
    name = meta(pod)["name"]
    assert pod["spec"]["schedulerName"] == TF_SCHEDULER, name
    assert labels_of(pod)[P + "component"] == "worker", name
    assert FINALIZER in (meta(pod).get("finalizers") or []), name
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        for side in ("requests", "limits"):
            assert GPU not in (resources.get(side) or {}), (name, container)
    assert annotations_of(pod).get(POD_COUNTER_KEY) == counter_key, (name, annotations_of(pod))


def check_native_pod(pod: Mapping[str, Any], template: Mapping[str, Any]) -> None:
    """A pod admitted as it came in: the template's labels, annotations and containers."""
    name = meta(pod)["name"]
    assert pod["spec"]["schedulerName"] == "default-scheduler", name
    expected_labels = {**template["metadata"]["labels"],
                       "pod-template-hash": labels_of(pod)["pod-template-hash"]}  # fmt: skip
    assert labels_of(pod) == expected_labels, name
    assert dict(annotations_of(pod)) == (template["metadata"].get("annotations") or {}), name
    assert not meta(pod).get("finalizers"), name
    assert [c.get("resources") for c in pod["spec"]["containers"]] == [
        pod_defaulted(c.get("resources") or {}) for c in template["spec"]["containers"]
    ], name


def pod_defaulted(resources: Mapping[str, Any]) -> dict[str, Any]:
    """A container's resources as the API server stores them in a pod: a limit without a
    request gives the request (the template of a Deployment is not defaulted so)."""
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    return {k: v for k, v in (("limits", limits), ("requests", requests)) if v}


def check_split(
    rollout: Rollout, template: Mapping[str, Any], *, tf: int, counter: str | None
) -> None:
    """`tf` TF pods counted under the ReplicaSet's key, the rest native and unchanged."""
    assert len(rollout.tf) == tf, rollout.summary()
    assert len(rollout.native) == len(rollout.pods) - tf, rollout.summary()
    expected = {} if counter is None else {rollout.counter_key: counter}
    assert rollout.counters == expected, rollout.summary()
    gated = ENABLED_REPLICAS in (template["metadata"].get("annotations") or {})
    for pod in rollout.tf:
        check_tf_pod(pod, rollout.counter_key if gated else None)
    for pod in rollout.native:
        check_native_pod(pod, template)


async def template_of(kube: AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    deployment = (await kube.get(DEPLOYMENT, name, namespace=namespace)).to_dict()
    template: dict[str, Any] = deployment["spec"]["template"]
    return template


async def patch_template(
    kube: AsyncClient, namespace: str, name: str, metadata: Mapping[str, Any]
) -> None:
    await kube.patch(DEPLOYMENT, name, {"spec": {"template": {"metadata": dict(metadata)}}},
                     namespace=namespace, patch_type=PatchType.MERGE)  # fmt: skip


async def workload_names(kube: AsyncClient, namespace: str) -> list[str]:
    return sorted([str(meta(w.to_dict())["name"]) async for w in kube.list(
        WORKLOAD, namespace=namespace)])  # fmt: skip


def watched(control_plane: ControlPlane, cluster: WebhookCluster) -> list[Component]:
    """The replicas and kube-controller-manager: their logs are shown when a wait times out."""
    managers = [c for c in control_plane.components if c.name == "kube-controller-manager"]
    return [*(r.component for r in cluster.replicas), *managers]


async def wait_for_leader(
    kube: AsyncClient, namespace: str, replica: Replica, components: Sequence[Component]
) -> None:
    """Only the leader's pod controller decrements counters and removes finalizers."""

    async def leads() -> bool:
        return await holder(kube, namespace) == replica.component.name

    await eventually(leads, what=f"{replica.component.name} leading", components=components)


# --------------------------------------------------------------------------- tests


async def test_the_guides_partial_rollout_raise_remove_and_roll_back(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects,
                                  flags=LEADER_ELECT)  # fmt: skip
    components = watched(control_plane, cluster)
    await wait_for_leader(kube, namespace, cluster.replica, components)
    guide = guide_deployment("web", namespace, replicas=10, annotations={ENABLED_REPLICAS: "3"})
    await kube.create(DEPLOYMENT.from_dict(guide))

    # 3 of 10 replicas use TensorFusion, the other 7 keep nvidia.com/gpu.
    first = await rolled_out(kube, namespace, "web", 10, components)
    template = await template_of(kube, namespace, "web")
    check_split(first, template, tf=3, counter="3")
    assert await workload_names(kube, namespace) == ["web"]

    # Deleted TF pods: the leader decrements, then removes the finalizer; the ReplicaSet
    # replaces them at once, so a replacement may be admitted before or after the decrement.
    deleted = [meta(p)["name"] for p in first.tf[:2]]
    for name in deleted:
        await kube.delete(POD, name, namespace=namespace, grace_period=0)
    second = await rolled_out(kube, namespace, "web", 10, components)
    assert second.uid == first.uid
    assert not {meta(p)["name"] for p in second.pods} & set(deleted)
    assert 1 <= len(second.tf) <= 3, second.summary()
    check_split(second, template, tf=len(second.tf), counter=str(len(second.tf)))
    # Deleted native pods: their replacements fill the free TF slots (at least one), no more.
    deleted = [meta(p)["name"] for p in second.native[:2]]
    for name in deleted:
        await kube.delete(POD, name, namespace=namespace, grace_period=0)
    third = await rolled_out(kube, namespace, "web", 10, components)
    assert third.uid == first.uid
    assert not {meta(p)["name"] for p in third.pods} & set(deleted)
    check_split(third, template, tf=3, counter="3")

    # Raising the number changes the template: a new ReplicaSet, a new pod-template-hash, a
    # new counter key. The old ReplicaSet's TF pods are decremented away: its key is deleted.
    await patch_template(kube, namespace, "web", {"annotations": {ENABLED_REPLICAS: "5"}})
    raised = await rolled_out(kube, namespace, "web", 10, components, not_uid=first.uid)
    template = await template_of(kube, namespace, "web")
    check_split(raised, template, tf=5, counter="5")
    assert raised.counter_key != first.counter_key
    old = (await kube.get(REPLICA_SET, first.name, namespace=namespace)).to_dict()
    assert old["spec"]["replicas"] == 0
    assert counters(old) == {}, f"the old ReplicaSet still counts: {counters(old)}"

    # Without the annotation every replica uses TensorFusion, nothing is counted.
    await patch_template(kube, namespace, "web", {"annotations": {ENABLED_REPLICAS: None}})
    everyone = await rolled_out(kube, namespace, "web", 10, components, not_uid=raised.uid)
    template = await template_of(kube, namespace, "web")
    check_split(everyone, template, tf=10, counter=None)
    old = (await kube.get(REPLICA_SET, raised.name, namespace=namespace)).to_dict()
    assert counters(old) == {}, f"the raised ReplicaSet still counts: {counters(old)}"
    assert await workload_names(kube, namespace) == ["web"]

    # Roll back with `enabled-replicas: "0"`: the webhook sees the pods and leaves them native.
    await patch_template(kube, namespace, "web", {"annotations": {ENABLED_REPLICAS: "0"}})
    zero = await rolled_out(kube, namespace, "web", 10, components, not_uid=everyone.uid)
    template = await template_of(kube, namespace, "web")
    check_split(zero, template, tf=0, counter=None)

    # Roll back with the label "false": the objectSelector keeps the pods from the webhook.
    rollback = {"labels": {ENABLED: "false"}, "annotations": {ENABLED_REPLICAS: None}}
    await patch_template(kube, namespace, "web", rollback)
    unlabelled = await rolled_out(kube, namespace, "web", 10, components, not_uid=zero.uid)
    template = await template_of(kube, namespace, "web")
    assert template["metadata"]["labels"][ENABLED] == "false"
    check_split(unlabelled, template, tf=0, counter=None)


def step8_deployment(name: str, namespace: str, tflops_limit: str) -> dict[str, Any]:
    """Step 8's Deployment: TFLOPS request 100 (limit given), no VRAM burst, CPU and memory."""
    annotations = {P + "tflops-request": "100", P + "tflops-limit": tflops_limit,
                   P + "vram-request": "3Gi", P + "vram-limit": "3Gi"}  # fmt: skip
    container = {"name": "my-workload", "image": "my-workload:1",
                 "resources": {"requests": {"memory": "1Gi", "cpu": "1000m"},
                               "limits": {"memory": "4Gi", "cpu": "4000m"}}}  # fmt: skip
    return guide_deployment(name, namespace, replicas=1, annotations=annotations,
                            containers=[container])  # fmt: skip


async def test_step8_requests_and_limits_and_a_dry_run_that_writes_nothing(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    await create_priority_classes(kube, cluster_objects)
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects)
    components = watched(control_plane, cluster)

    # A server-side dry run of a counted TF pod: the mutated pod comes back, nothing is written.
    # (The pod's labels do not match the ReplicaSet's selector, so that the ReplicaSet, of 0
    # replicas, does not delete the real one created afterwards.)
    await kube.create(REPLICA_SET.from_dict({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "dry-rs", "namespace": namespace},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "dry"}},
                 "template": {"metadata": {"labels": {"app": "dry"}},
                              "spec": {"containers": [{"name": "app", "image": "x"}]}}},
    }))  # fmt: skip

    async def synced() -> dict[str, Any] | None:
        """The ReplicaSet once its controller wrote its status (a write that is not ours)."""
        found = (await kube.get(REPLICA_SET, "dry-rs", namespace=namespace)).to_dict()
        status = found.get("status") or {}
        return found if status.get("observedGeneration", 0) >= meta(found)["generation"] else None

    before = await eventually(synced, what="dry-rs status written", components=components)
    reference = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "dry-rs",
                 "uid": meta(before)["uid"], "controller": True}  # fmt: skip
    pod = make_pod(resources_ok(**{"enabled-replicas": "2"}), name="dry-pod",
                   namespace=namespace, owner=reference,
                   labels={"pod-template-hash": "dry"})  # fmt: skip
    answer = (await kube.create(POD.from_dict(pod), dry_run=True)).to_dict()
    check_tf_pod(answer, COUNTER_PREFIX + "dry")
    with pytest.raises(ApiError) as missing:
        await kube.get(POD, "dry-pod", namespace=namespace)
    assert missing.value.status.code == 404
    assert await workload_names(kube, namespace) == [], "a dry run created the workload"
    after = (await kube.get(REPLICA_SET, "dry-rs", namespace=namespace)).to_dict()
    assert counters(after) == {}, "a dry run counted"
    assert meta(after)["resourceVersion"] == meta(before)["resourceVersion"], "a dry run wrote"
    # The same pod for real: counted and its workload written (what the dry run left out).
    await kube.create(POD.from_dict(pod))
    after = (await kube.get(REPLICA_SET, "dry-rs", namespace=namespace)).to_dict()
    assert counters(after) == {COUNTER_PREFIX + "dry": "1"}
    assert await workload_names(kube, namespace) == ["dry-rs"]

    # compute may burst to 2x the request: accepted; requests differ from limits → medium.
    await kube.create(DEPLOYMENT.from_dict(step8_deployment("burst", namespace, "200")))
    # requests equal limits → high, with its priority class.
    await kube.create(DEPLOYMENT.from_dict(step8_deployment("steady", namespace, "100")))
    burst = await rolled_out(kube, namespace, "burst", 1, components)
    steady = await rolled_out(kube, namespace, "steady", 1, components)
    for name, rollout, limit, qos in (("burst", burst, "200", "medium"),
                                      ("steady", steady, "100", "high")):  # fmt: skip
        [worker] = rollout.tf
        check_tf_pod(worker, None)
        annotations = annotations_of(worker)
        assert {k: annotations.get(P + k) for k in (
            "tflops-request", "tflops-limit", "vram-request", "vram-limit", "qos")} == {
            "tflops-request": "100", "tflops-limit": limit, "vram-request": "3Gi",
            "vram-limit": "3Gi", "qos": qos}, annotations  # fmt: skip
        # CPU and memory untouched (the index resource of §11 is added beside them).
        [container] = worker["spec"]["containers"]
        own = {side: {k: v for k, v in values.items() if not k.startswith(P)}
               for side, values in container["resources"].items()}  # fmt: skip
        assert own == {"requests": {"memory": "1Gi", "cpu": "1"},
                       "limits": {"memory": "4Gi", "cpu": "4"}}, container  # fmt: skip
        spec = (await kube.get(WORKLOAD, name, namespace=namespace)).to_dict()["spec"]
        assert spec["qos"] == qos, spec
        assert {side: {k: spec["resources"][side].get(k) for k in ("tflops", "vram")}
                for side in ("requests", "limits")} == {
            "requests": {"tflops": "100", "vram": "3Gi"},
            "limits": {"tflops": limit, "vram": "3Gi"}}, spec  # fmt: skip
    assert "priorityClassName" not in burst.tf[0]["spec"], burst.tf[0]["spec"]
    assert steady.tf[0]["spec"].get("priorityClassName") == "tensor-fusion-high"
    assert steady.tf[0]["spec"].get("priority") == PRIORITY_CLASSES["tensor-fusion-high"]


_ADMISSIONS = re.compile(r"^tf_webhook_admission_seconds_count(?:\{[^}]*\})? (\S+)$", re.M)


async def admissions(replica: Replica) -> float:
    """AdmissionReviews the replica answered (its `tf_webhook_admission_seconds` count)."""
    code, text = await replica.get("/metrics", metrics=True)
    assert code == 200, text
    found = _ADMISSIONS.search(text)
    assert found is not None, text
    return float(found.group(1))


async def test_two_replicas_behind_one_url_count_exactly_n(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    proxy_host = "127.0.0.9"
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects,
                                  count=2, url_host=proxy_host, flags=LEADER_ELECT,
                                  extra_hosts=[proxy_host])  # fmt: skip
    components = watched(control_plane, cluster)
    upstreams = [(r.ip, cluster.port) for r in cluster.replicas]
    async with round_robin_proxy(proxy_host, cluster.port, upstreams) as proxy:
        guide = guide_deployment("wide", namespace, replicas=0,
                                 annotations={ENABLED_REPLICAS: "10"})  # fmt: skip
        await kube.create(DEPLOYMENT.from_dict(guide))
        await kube.patch(DEPLOYMENT, "wide", {"spec": {"replicas": 20}}, namespace=namespace,
                         patch_type=PatchType.MERGE)  # fmt: skip
        wide = await rolled_out(kube, namespace, "wide", 20, components)
        template = await template_of(kube, namespace, "wide")
        check_split(wide, template, tf=10, counter="10")
        answered = [await admissions(r) for r in cluster.replicas]
        assert all(n > 0 for n in answered), (
            f"admissions per replica {answered}, proxied connections {proxy.connections}"
        )
        assert sum(answered) >= 20, answered
