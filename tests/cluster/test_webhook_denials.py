"""Denials of the pod webhook through the real API server (admission.md §2, §4, §5, §9, §13):
every bad input is created with the API server, which calls a controller replica's webhook
through a MutatingWebhookConfiguration, and must be refused with the webhook's code and exact
message, with nothing changed: no pod, no TensorFusionWorkload in the namespace, no counter
annotation on the pod's owner, and the leader's pod index not advanced.

One replica serves the whole table (starting one is slow); every mismatch of every case is
collected into one failure message. The namespace quota cases (403) run last, once the replica's
cache holds the GPUResourceQuota.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient

from tensorfusion.adapters.kube.custom_resources import resource_of

from ..unit.admission.admission_builders import make_pod, make_pool, native_container, resources_ok
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane, eventually
from .test_webhook_vectors import (
    DENIED,
    POD,
    IndexReader,
    Mismatches,
    P,
    create_pod,
    create_replica_set,
    pod_index_reader,
    replica_set_annotations,
    workload_names,
)
from .webhook_setup import POOL, start_webhook

pytestmark = pytest.mark.cluster

QUOTA: Any = resource_of("GPUResourceQuota")
BOOL = 'must be "true" or "false"'
QUANTITY = "not a quantity (example: {})"
INDICES = "must be a comma-separated list of 1 to 128 distinct integers >= 0"
DURATION = "must be a non-negative duration such as 300ms, 5m or 1h30m"
REMOTE = "remote vGPU is not supported by this version"
COUNTED = {"app": "counted", "pod-template-hash": "abc"}
QUOTA_NAME = "gpu-quota"


def bad(key: str, value: str, rule: str) -> str:
    """The §2 format: `<full annotation key>: invalid value "<value>": <rule>`."""
    return f'{P}{key}: invalid value "{value}": {rule}'


@dataclass(frozen=True)
class Denial:
    """One bad pod: annotations over vector 1's resources (`None` removes one), the code and
    the webhook's exact message (`{namespace}`, `{remote_pool}` filled in at run time).

    `owner`: "counted" (a ReplicaSet whose counter must not change; `enabled-replicas: "3"`
    added unless given), "gone" (a vanished ReplicaSet, `enabled-replicas: "1"`) or "none".
    """

    name: str
    annotations: Mapping[str, str | None]
    message: str
    code: int = 400
    owner: str = "counted"
    containers: list[dict[str, Any]] | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    wait_for_cache: bool = False


def gpu(count: Any, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"limits": {resource: count}}


NO_RESOURCES = {"tflops-request": None, "tflops-limit": None, "vram-request": None,
                "vram-limit": None}  # fmt: skip
NO_TFLOPS = {"tflops-request": None, "tflops-limit": None}

DENIALS: tuple[Denial, ...] = (
    # §5 syntax, one annotation at a time, in the order of the table.
    Denial("enabled-replicas negative", {"enabled-replicas": "-1"},
           bad("enabled-replicas", "-1", "must be a non-negative integer")),
    Denial("enabled-replicas not a number", {"enabled-replicas": "two"},
           bad("enabled-replicas", "two", "must be a non-negative integer")),
    Denial("workload-profile blank", {"workload-profile": " "},
           bad("workload-profile", " ", "must not be empty")),
    Denial("workload-profile missing", {"workload-profile": "no-such-profile"},
           'WorkloadProfile "no-such-profile" not found in namespace "{namespace}" '
           f"({P}workload-profile)"),
    Denial("gpupool empty", {"gpupool": ""}, bad("gpupool", "", "must not be empty")),
    Denial("gpupool missing", {"gpupool": "no-such-pool"},
           f'GPU pool "no-such-pool" not found ({P}gpupool)'),
    Denial("is-local-gpu not a bool", {"is-local-gpu": "yes"}, bad("is-local-gpu", "yes", BOOL)),
    Denial("is-local-gpu false (remote vGPU)", {"is-local-gpu": "false"},
           bad("is-local-gpu", "false", REMOTE)),
    Denial("pool defaultUsingLocalGPU false (remote vGPU)", {"gpupool": "{remote_pool}"},
           'GPUPool "{remote_pool}" spec.defaultUsingLocalGPU: invalid value "false": ' + REMOTE,
           wait_for_cache=True),
    Denial("sidecar-worker not a bool", {"sidecar-worker": "1"}, bad("sidecar-worker", "1", BOOL)),
    Denial("dedicated-gpu not a bool", {"dedicated-gpu": "True"},
           bad("dedicated-gpu", "True", BOOL)),
    Denial("autoscale not a bool", {"autoscale": "on"}, bad("autoscale", "on", BOOL)),
    Denial("gang-enabled not a bool", {"gang-enabled": "yes"}, bad("gang-enabled", "yes", BOOL)),
    Denial("require-gpu-topology not a bool", {"require-gpu-topology": "no"},
           bad("require-gpu-topology", "no", BOOL)),
    Denial("isolation unknown", {"isolation": "exclusive"},
           bad("isolation", "exclusive", "must be one of shared, soft, hard, partitioned")),
    Denial("isolation partitioned", {"isolation": "partitioned", "partition-id": "p1"},
           bad("isolation", "partitioned",
               "partitioned isolation is not supported by this version")),
    Denial("partition-id empty", {"partition-id": ""},
           bad("partition-id", "", "must not be empty")),
    Denial("partition-id without partitioned", {"partition-id": "p1"},
           bad("partition-id", "p1", f"only allowed with {P}isolation=partitioned")),
    Denial("worker-pod-template (remote mode)", {"worker-pod-template": "x"},
           bad("worker-pod-template", "x", REMOTE)),
    Denial("tflops-limit not a quantity", {"tflops-limit": "lots"},
           bad("tflops-limit", "lots", QUANTITY.format("100"))),
    Denial("tflops-request negative", {"tflops-request": "-1"},
           bad("tflops-request", "-1", "must not be negative")),
    Denial("vram-limit 16GB", {"vram-limit": "16GB"},
           bad("vram-limit", "16GB", QUANTITY.format("16Gi"))),
    Denial("vram-request 3Gx", {"vram-request": "3Gx"},
           bad("vram-request", "3Gx", QUANTITY.format("3Gi"))),
    Denial("vram-request negative", {"vram-request": "-1Gi"},
           bad("vram-request", "-1Gi", "must not be negative")),
    Denial("compute-percent-limit zero", {**NO_TFLOPS, "compute-percent-limit": "0"},
           bad("compute-percent-limit", "0", "must be greater than 0 and at most 100")),
    Denial("compute-percent-request over 100", {**NO_TFLOPS, "compute-percent-request": "101"},
           bad("compute-percent-request", "101", "must be greater than 0 and at most 100")),
    Denial("compute-percent-request not a quantity",
           {**NO_TFLOPS, "compute-percent-request": "half"},
           bad("compute-percent-request", "half", QUANTITY.format("50"))),
    Denial("tflops-limit with compute-percent-limit", {"compute-percent-limit": "50"},
           bad("compute-percent-limit", "50", f"mutually exclusive with {P}tflops-limit")),
    Denial("tflops-request with compute-percent-request", {"compute-percent-request": "50"},
           bad("compute-percent-request", "50", f"mutually exclusive with {P}tflops-request")),
    Denial("gpu-count zero", {"gpu-count": "0"},
           bad("gpu-count", "0", "must be an integer between 1 and 128")),
    Denial("gpu-count 129", {"gpu-count": "129"},
           bad("gpu-count", "129", "must be an integer between 1 and 128")),
    Denial("gpu-count fraction", {"gpu-count": "1.5"},
           bad("gpu-count", "1.5", "must be an integer between 1 and 128")),
    Denial("gpu-indices duplicate", {"gpu-indices": "0,0"}, bad("gpu-indices", "0,0", INDICES)),
    Denial("gpu-indices not integers", {"gpu-indices": "a,1"}, bad("gpu-indices", "a,1", INDICES)),
    Denial("gpu-count differs from gpu-indices", {"gpu-count": "2", "gpu-indices": "0,1,2"},
           bad("gpu-count", "2", f"must equal the number of entries of {P}gpu-indices (3)")),
    Denial("qos unknown", {"qos": "urgent"},
           bad("qos", "urgent", "must be one of low, medium, high, critical")),
    Denial("gpu-model blank", {"gpu-model": "  "}, bad("gpu-model", "  ", "must not be empty")),
    Denial("vendor empty", {"vendor": ""}, bad("vendor", "", "must not be empty")),
    Denial("vendor AMD with soft isolation", {"vendor": "AMD"},
           bad("isolation", "soft",
               'soft isolation is not supported for vendor "AMD" (use shared or hard)')),
    Denial("inject-container unknown", {"inject-container": "sidecar"},
           bad("inject-container", "sidecar",
               "no container named sidecar in the pod (containers: app)")),
    Denial("inject-container no names", {"inject-container": ", ,"},
           bad("inject-container", ", ,", "must list at least one container name")),
    Denial("two containers without inject-container", {},
           f"{P}inject-container: required when the pod has more than one container "
           "(app, side)",
           containers=[{"name": "app", "image": "x"}, {"name": "side", "image": "x"}]),
    Denial("autoscale-target unknown", {"autoscale-target": "gpu"},
           bad("autoscale-target", "gpu", "must be one of compute, vram, all")),
    Denial("unknown disable-features item is no error", {"disable-features": "bogus",
                                                         "vram-limit": "16GB"},
           bad("vram-limit", "16GB", QUANTITY.format("16Gi"))),
    Denial("gang-min-members one", {"gang-min-members": "1"},
           bad("gang-min-members", "1", "must be 0 or an integer of at least 2")),
    Denial("gang-min-members negative", {"gang-min-members": "-2"},
           bad("gang-min-members", "-2", "must be a non-negative integer")),
    Denial("gang-timeout not a duration", {"gang-timeout": "forever"},
           bad("gang-timeout", "forever", DURATION)),
    Denial("eviction-protection not a duration", {"eviction-protection": "5 minutes"},
           bad("eviction-protection", "5 minutes", DURATION)),
    Denial("gpu-topology-max-tier 4", {"gpu-topology-max-tier": "4"},
           bad("gpu-topology-max-tier", "4", "must be an integer between 0 and 3")),
    Denial("gpu-topology-source unknown", {"gpu-topology-source": "nvlink"},
           bad("gpu-topology-source", "nvlink", "must be one of auto, numa, vendor")),
    # §4 steps 1, 10, 11, 13 and §9: the semantic checks.
    Denial("no containers", {}, "pod has no containers (spec.containers)", containers=[]),
    Denial("no GPU resources", NO_RESOURCES,
           f"no GPU resources requested: set {P}tflops-request, {P}compute-percent-request or "
           f"{P}vram-request (or the matching limit)"),
    Denial("tflops-request above tflops-limit", {"tflops-request": "30"},
           bad("tflops-request", "30", f"must not exceed {P}tflops-limit (20)")),
    Denial("vram-request above vram-limit", {"vram-request": "8Gi"},
           bad("vram-request", "8Gi", f"must not exceed {P}vram-limit (4Gi)")),
    Denial("compute-percent-request above compute-percent-limit",
           {**NO_TFLOPS, "compute-percent-request": "60", "compute-percent-limit": "50"},
           bad("compute-percent-request", "60", f"must not exceed {P}compute-percent-limit (50)")),
    Denial("dedicated-gpu without a model", {"dedicated-gpu": "true"},
           bad("dedicated-gpu", "true", f"requires {P}gpu-model (or the profile's gpuModel)")),
    Denial("dedicated-gpu with an unknown model", {"dedicated-gpu": "true", "gpu-model": "X9"},
           bad("gpu-model", "X9", f"no GPU of this model exists (required by {P}dedicated-gpu)")),
    Denial("native GPU fraction", {},
           'container "app" limits nvidia.com/gpu: invalid value "500m": must be a whole number',
           containers=[{"name": "app", "image": "x", "resources": gpu("500m")}]),
    Denial("native GPU in a container not injected", {"inject-container": "app"},
           f'container "side" holds native GPU resources but is not an injected container '
           f"({P}inject-container)",
           containers=[{"name": "app", "image": "x"}, native_container("side", 1)]),
    Denial("native GPU in an init container", {},
           'init container "init" holds native GPU resources, which TensorFusion cannot provide '
           "to init containers",
           spec={"initContainers": [{"name": "init", "image": "x", "resources": gpu(1)}]}),
    # Three errors at once, given out of order: all three, in the order of the §5 table.
    Denial("three errors at once", {"qos": "urgent", "gpu-count": "0", "vram-request": "3Gx"},
           "; ".join((bad("vram-request", "3Gx", QUANTITY.format("3Gi")),
                      bad("gpu-count", "0", "must be an integer between 1 and 128"),
                      bad("qos", "urgent", "must be one of low, medium, high, critical")))),
    # §8: the controller owner named by the pod is gone.
    Denial("owner vanished", {"enabled-replicas": "1"},
           f'ReplicaSet "gone-rs" not found (controller owner of the pod, needed by '
           f"{P}enabled-replicas)", code=409, owner="gone"),
    # Issue 22 finding 7: a pod may not bring the allocation annotations the scheduler writes.
    Denial("own allocation annotations", {"gpu-ids": "gpu-0"},
           bad("gpu-ids", "gpu-0", "written only by the TensorFusion scheduler when it binds "
               "the pod; a new pod may not set it"), code=403),
)  # fmt: skip

QUOTA_DENIALS: tuple[Denial, ...] = (
    Denial("namespace quota maxRequests.tflops", {"tflops-request": "20"},
           bad("tflops-request", "20", f'exceeds the namespace quota (GPUResourceQuota '
               f'"{QUOTA_NAME}" spec.single.maxRequests.tflops = 15)'),
           code=403, wait_for_cache=True),
    Denial("namespace quota maxGPUCount", {"gpu-count": "4"},
           bad("gpu-count", "4", f'exceeds the namespace quota (GPUResourceQuota "{QUOTA_NAME}" '
               "spec.single.maxGPUCount = 2)"),
           code=403, wait_for_cache=True),
)  # fmt: skip


@dataclass
class Table:
    """What every case shares: the namespace, the owners and the pod index."""

    kube: AsyncClient
    namespace: str
    counted_owner: dict[str, Any]
    read_index: IndexReader
    names: dict[str, str]
    found: Mismatches = field(default_factory=Mismatches)

    def pod(self, number: int, case: Denial) -> dict[str, Any]:
        annotations: dict[str, str] = dict(resources_ok())
        labels: dict[str, str] = {}
        owner: dict[str, Any] | None = None
        if case.owner == "counted":
            annotations["enabled-replicas"] = "3"
            labels, owner = dict(COUNTED), self.counted_owner
        elif case.owner == "gone":
            owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone-rs",
                     "uid": "6c3d2c1e-0000-4000-8000-000000000000", "controller": True}  # fmt: skip
        for key, value in case.annotations.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value.format(**self.names)
        return make_pod(annotations, name=f"deny-{number}", namespace=self.namespace,
                        labels=labels, owner=owner, containers=case.containers,
                        spec=case.spec)  # fmt: skip

    async def state(self) -> tuple[int, dict[str, str], list[str]]:
        """The leader's next pod index, the counted owner's annotations, the workloads."""
        return (
            await self.read_index(),
            await replica_set_annotations(self.kube, self.namespace, "counted-rs"),
            await workload_names(self.kube, self.namespace),
        )

    async def wait_for_cache(self, pod: Mapping[str, Any], message: str) -> None:
        """Server-side dry runs (no writes) until the replica's caches give the denial."""

        async def denied_as_expected() -> bool:
            try:
                await self.kube.create(POD.from_dict(dict(pod)), dry_run=True)
            except ApiError as error:
                return error.status.message == message
            return False

        # On time-out the real create below records what the webhook answers.
        with contextlib.suppress(AssertionError):
            await eventually(denied_as_expected, what="the replica's cache", timeout=30)

    async def run(self, number: int, case: Denial) -> None:
        pod = self.pod(number, case)
        name = f"#{number} {case.name}"
        message = DENIED + case.message.format(**self.names)
        if case.wait_for_cache:
            await self.wait_for_cache(pod, message)
        before = await self.state()
        created = await create_pod(self.kube, pod)
        if not isinstance(created, ApiError):
            admitted = created["metadata"].get("annotations")
            self.found.true(name, "denied", False, f"admitted with annotations {admitted}")
            return
        self.found.equal(name, "code", created.status.code, case.code)
        self.found.equal(name, "message", created.status.message, message)
        index, owner, workloads = await self.state()
        self.found.equal(name, "the leader's pod index (not advanced)", index, before[0])
        self.found.equal(name, "the owner's annotations (no counter)", owner, before[1])
        self.found.equal(name, "TensorFusionWorkloads in the namespace", workloads, before[2])


async def test_bad_pods_are_denied_with_their_message_and_nothing_changes(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
) -> None:
    cluster = await start_webhook(control_plane, kube, namespace, replicas, cluster_objects)
    remote = make_pool(f"{cluster.release}-remote", default=False,
                       spec={"defaultUsingLocalGPU": False})  # fmt: skip
    await kube.create(POOL.from_dict(remote))
    cluster_objects(POOL, remote["metadata"]["name"])
    table = Table(
        kube, namespace,
        counted_owner=await create_replica_set(kube, namespace, "counted-rs", COUNTED),
        read_index=await pod_index_reader(kube, cluster, namespace),
        names={"namespace": namespace, "remote_pool": remote["metadata"]["name"]},
    )  # fmt: skip
    assert len(DENIALS) >= 30
    for number, case in enumerate(DENIALS, start=1):
        await table.run(number, case)

    await kube.create(QUOTA.from_dict({
        "apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota",
        "metadata": {"name": QUOTA_NAME, "namespace": namespace},
        "spec": {"single": {"maxRequests": {"tflops": "15"}, "maxGPUCount": 2}},
    }))  # fmt: skip
    for number, case in enumerate(QUOTA_DENIALS, start=len(DENIALS) + 1):
        await table.run(number, case)
    table.found.check()


def test_the_table_covers_every_annotation_of_the_spec() -> None:
    """Each annotation of admission.md §5 with a denial rule has at least one bad input."""
    keys = {key for case in (*DENIALS, *QUOTA_DENIALS) for key in case.annotations}
    rules = {
        "enabled-replicas", "workload-profile", "gpupool", "is-local-gpu", "sidecar-worker",
        "dedicated-gpu", "autoscale", "gang-enabled", "require-gpu-topology", "isolation",
        "partition-id", "worker-pod-template", "tflops-limit", "tflops-request", "vram-limit",
        "vram-request", "compute-percent-limit", "compute-percent-request", "gpu-count",
        "gpu-indices", "qos", "gpu-model", "vendor", "inject-container", "autoscale-target",
        "disable-features", "gang-min-members", "gang-timeout", "eviction-protection",
        "gpu-topology-max-tier", "gpu-topology-source",
    }  # fmt: skip
    assert sorted(rules - keys) == []
    names = [case.name for case in (*DENIALS, *QUOTA_DENIALS)]
    assert len(set(names)) == len(names), "case names must be unique"
