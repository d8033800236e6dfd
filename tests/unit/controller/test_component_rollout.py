"""Rollouts of a pool's component changes against an in-memory API server (deployment.md §11):
the first hash only recorded; batches of the oldest GPUNodes that complete when the new agents
beat, `batchInterval` apart, with progress, annotations and `ConfigSynced`; the flag off or 0 %
changes no pod; windows reported (one Event per generation) unless the pool opts in, then
batches wait for one; client pods with an owner deleted batch by batch, bare ones never."""

from __future__ import annotations

from typing import Any

from tensorfusion.controller.component_rollout import ComponentRollout
from tensorfusion.controller.hypervisor_pods import HypervisorPodReconciler
from tensorfusion.domain.admission.hashing import client_config_hash
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pods import HypervisorPodSettings
from tensorfusion.domain.model import GPUPool

from .reconciler_fakes import (
    NOW,
    FakeApi,
    FakeRecorder,
    Fence,
    gpu_node,
    node,
    pool,
    rfc3339,
)

NS = "tf-sys"
NODES = [f"n{i}" for i in range(5)]


class World:
    """Pool `shared` of five Ready nodes whose agents run and beat; a clock the test moves."""

    def __init__(self, **policy: Any) -> None:
        self.now = NOW
        self.api = FakeApi()
        self.recorder = FakeRecorder()
        rolling = {"autoUpdateHypervisor": True, "batchPercentage": 40, "batchInterval": "5m",
                   **policy}  # fmt: skip
        self.api.put({**pool("shared", componentConfig={"hypervisor": {"image": "agent:1"}}),
                      "metadata": {"name": "shared", "generation": 1}})  # fmt: skip
        self.set_policy(rolling)
        for index, name in enumerate(NODES):
            self.api.put({**node(name), "status": {"conditions": [
                {"type": "Ready", "status": "True"}]}})  # fmt: skip
            obj = gpu_node(name, "shared")
            obj["metadata"]["creationTimestamp"] = rfc3339(NOW - 1000 + index)
            self.api.put(obj)
        common: dict[str, Any] = {"client": self.api, "fence": Fence(), "recorder": self.recorder}
        self.agents = HypervisorPodReconciler(
            gpu_nodes=self.api.cache("GPUNode"), nodes=self.api.cache("Node"),
            pools=self.api.cache("GPUPool"), hypervisor_pods=self.api.cache("Pod"),
            templates=self.api.cache("SchedulingConfigTemplate"),
            provider_configs=self.api.cache("ProviderConfig"),
            settings=HypervisorPodSettings(namespace=NS, default_image="default:0"), **common,
        )  # fmt: skip
        self.rollout = ComponentRollout(
            pools=self.api.cache("GPUPool"), gpu_nodes=self.api.cache("GPUNode"),
            hypervisor_pods=self.api.cache("Pod"), client_pods=self.api.cache("Pod"),
            agents=self.agents, agent_readiness_mode="heartbeat", clock=lambda: self.now,
            **common,
        )  # fmt: skip

    def set_policy(self, policy: dict[str, Any], **annotations: str) -> None:
        current = self.api.obj("GPUPool", "shared")
        spec = {**current["spec"], "nodeManagerConfig": {"nodePoolRollingUpdatePolicy": policy}}
        metadata = {**current["metadata"], "generation": current["metadata"]["generation"] + 1,
                    "annotations": {**current["metadata"].get("annotations", {}),
                                    **annotations}}  # fmt: skip
        self.api.put({**current, "metadata": metadata, "spec": spec})

    def set_image(self, image: str) -> None:
        current = self.api.obj("GPUPool", "shared")
        spec = {**current["spec"], "componentConfig": {"hypervisor": {"image": image}}}
        self.api.put({**current, "spec": spec})

    async def agents_settle(self) -> None:
        """The agent-pod reconciler looks at every node until nothing changes; new pods get
        their creation time, and their agents beat only when `beat` says so."""
        for _ in range(3):
            for name in NODES:
                await self.agents.reconcile(name)
        self.now += 5
        for name in NODES:
            pod = self.api.objects.get(("Pod", NS, f"hypervisor-{name}"))
            if pod is not None and "creationTimestamp" not in pod["metadata"]:
                pod["metadata"]["creationTimestamp"] = rfc3339(self.now)

    def beat(self, *names: str) -> None:
        """Heartbeats newer than the nodes' pods: the GPUNodes Running."""
        for name in names or NODES:
            current = self.api.obj("GPUNode", name)
            beat = {"hypervisorState": "Running", "lastHeartbeatTime": rfc3339(self.now + 1)}
            status = {"phase": "Running", "hypervisorStatus": beat}
            self.api.put({**current, "status": status})

    def images(self) -> list[str]:
        return [self.api.obj("Pod", f"hypervisor-{n}", NS)["spec"]["containers"][0]["image"]
                for n in NODES]  # fmt: skip

    def pool(self) -> dict[str, Any]:
        return self.api.obj("GPUPool", "shared")

    def status(self) -> dict[str, Any]:
        return dict(self.pool()["status"]["componentStatus"])

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.pool()["status"]["conditions"] if c["type"] == kind)

    async def running(self) -> None:
        await self.agents_settle()
        self.now += 2
        self.beat()
        await self.rollout.reconcile("shared")


async def test_the_first_hash_is_recorded_and_a_change_rolls_out_in_batches() -> None:
    world = World()
    await world.running()
    first = world.status()
    assert first["hypervisorConfigSynced"] and first["hypervisorUpdateProgress"] == 100
    assert first["workerConfigSynced"] and first["clientConfigSynced"]
    assert world.condition("ConfigSynced")["status"] == "True"

    world.set_image("agent:2")
    await world.agents_settle()
    assert world.images() == ["agent:1"] * 5, "Running GPUNodes keep their pods until selected"
    await world.rollout.reconcile("shared")
    in_progress = KEYS.update_in_progress("hypervisor")
    assert world.pool()["metadata"]["annotations"][in_progress] == "n0,n1", "ceil(40 % of 5)"
    assert world.status()["hypervisor"] != first["hypervisor"]
    assert world.condition("ConfigSynced")["reason"] == "RolloutInProgress"
    await world.agents_settle()
    assert world.images() == ["agent:2", "agent:2", "agent:1", "agent:1", "agent:1"]

    await world.rollout.reconcile("shared")  # the new agents have not beaten yet
    assert world.pool()["metadata"]["annotations"][in_progress] == "n0,n1"
    world.now += 1
    world.beat("n0", "n1")
    wait = await world.rollout.reconcile("shared")
    annotations = world.pool()["metadata"]["annotations"]
    assert in_progress not in annotations
    assert annotations[KEYS.batch_update_last_time("hypervisor")] == rfc3339(world.now)
    assert world.status()["hypervisorUpdateProgress"] == 40 and wait == 300

    world.now += 100
    assert await world.rollout.reconcile("shared") == 200, "batchInterval not over"
    await world.agents_settle()
    assert world.images().count("agent:2") == 2
    world.now += 200
    await world.rollout.reconcile("shared")
    assert world.pool()["metadata"]["annotations"][in_progress] == "n2,n3"
    for batch in (("n2", "n3"), ("n4",)):
        await world.agents_settle()
        world.now += 1
        world.beat(*batch)
        await world.rollout.reconcile("shared")
        world.now += 300
        await world.rollout.reconcile("shared")
    await world.agents_settle()
    world.beat("n4")
    await world.rollout.reconcile("shared")
    assert world.images() == ["agent:2"] * 5
    done = world.status()
    assert done["hypervisorConfigSynced"] and done["hypervisorUpdateProgress"] == 100


async def test_the_flag_off_or_zero_percent_changes_no_pod() -> None:
    for policy, reason in (({"autoUpdateHypervisor": False}, "OutOfSync"),
                           ({"autoUpdateHypervisor": True, "batchPercentage": 0},
                            "RolloutPaused")):  # fmt: skip
        world = World(**policy)
        await world.running()
        world.set_image("agent:2")
        await world.agents_settle()
        await world.rollout.reconcile("shared")
        await world.agents_settle()
        assert world.images() == ["agent:1"] * 5
        status = world.status()
        assert not status["hypervisorConfigSynced"] and status["hypervisorUpdateProgress"] == 0
        synced = world.condition("ConfigSynced")
        assert (synced["status"], synced["reason"]) == ("False", reason)
        assert "hypervisor: " in synced["message"]


async def test_a_window_is_reported_once_per_generation_and_gates_only_on_opt_in() -> None:
    world = World(maintenanceWindow={"includes": ["0 3 * * *"]}, maxDuration="1h")
    await world.running()
    window = world.condition("MaintenanceWindow")
    assert (window["status"], window["reason"]) == ("False", "NotEnforced")
    assert "0 3 * * *" in window["message"]
    await world.rollout.reconcile("shared")
    assert world.recorder.reasons() == ["MaintenanceWindowNotEnforced"]

    policy = world.pool()["spec"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    world.set_policy(policy, **{KEYS.honour_maintenance_window: "true"})
    await world.rollout.reconcile("shared")
    assert world.condition("MaintenanceWindow")["reason"] == "OutsideWindow", "nothing waits"
    world.set_image("agent:2")
    await world.agents_settle()
    await world.rollout.reconcile("shared")
    await world.rollout.reconcile("shared")
    await world.agents_settle()
    assert world.images() == ["agent:1"] * 5, "08:00 UTC: outside the 03:00 window"
    assert world.condition("MaintenanceWindow")["reason"] == "WaitingForWindow"
    assert world.recorder.reasons().count("RolloutWaitingForMaintenanceWindow") == 1
    world.now += 19 * 3600 + 600  # 03:10 the next day
    await world.rollout.reconcile("shared")
    await world.agents_settle()
    assert world.images().count("agent:2") == 2
    assert world.condition("MaintenanceWindow")["reason"] == "InWindow"

    world.set_policy({**policy, "maintenanceWindow": {"includes": ["61 * * * *"]}})
    await world.rollout.reconcile("shared")
    assert "InvalidMaintenanceWindow" in world.recorder.reasons()
    world.now += 1
    world.beat("n0", "n1")  # the started batch finishes
    await world.rollout.reconcile("shared")
    world.now += 301
    await world.rollout.reconcile("shared")
    assert world.condition("MaintenanceWindow")["reason"] == "WaitingForWindow", "no valid window"
    assert world.images().count("agent:2") == 2


async def test_client_pods_with_an_owner_are_deleted_batch_by_batch() -> None:
    world = World(autoUpdateClient=True, batchPercentage=50)
    old = client_config_hash(GPUPool.model_validate(world.pool()))
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u",
              "controller": True}]  # fmt: skip
    for index in range(4):
        world.api.put(client_pod(f"app-{index}", old, owner if index < 3 else []))
    await world.running()
    assert world.status()["clientConfigSynced"]
    current = world.pool()
    components = {**current["spec"]["componentConfig"], "client": {"operatorEndpoint": "x"}}
    spec = {**current["spec"], "componentConfig": components}
    world.api.put({**current, "spec": spec})
    await world.rollout.reconcile("shared")
    assert alive(world) == ["app-2", "app-3"], "ceil(50 % of 3) oldest owned pods deleted"
    assert world.status()["clientUpdateProgress"] == 0
    world.now += 301
    await world.rollout.reconcile("shared")  # the batch is gone: complete
    world.now += 301
    await world.rollout.reconcile("shared")
    assert alive(world) == ["app-3"], "the bare pod is never deleted"
    await world.rollout.reconcile("shared")  # the deletion's event
    assert world.status()["clientConfigSynced"]


def client_pod(name: str, template_hash: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    labels = {KEYS.component: "worker", KEYS.gpupool: "shared",
              KEYS.pod_template_hash: template_hash}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "labels": labels,
                         "ownerReferences": owners,
                         "creationTimestamp": rfc3339(NOW - 100 + int(name[-1]))},
            "status": {"phase": "Running"}}  # fmt: skip


def alive(world: World) -> list[str]:
    return sorted(n for (k, ns, n) in world.api.objects if k == "Pod" and ns == "ml")
