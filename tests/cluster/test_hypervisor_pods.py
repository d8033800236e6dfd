"""The leader's agent pods on the real control plane (deployment.md §10): a controller replica
in heartbeat mode keeps one `hypervisor-<node>` pod per GPUNode, with its owners, labels, env
and the hash of the rendered pod; `agent_runner` starts each agent from its pod's env, as a
kubelet would; the GPUs become Running; a deleted pod comes back with a new UID and a new agent;
a NotReady node gets no pod until it is Ready."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, ServiceAccount
from lightkube.types import PatchType

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.app.controller_reconcilers import HYPERVISOR_IMAGE
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.desired_state.hypervisor_pods import (
    HypervisorInputs,
    HypervisorPodSettings,
    hardware_metadata_json,
    hypervisor_pod_name,
    metrics_write_target,
    render_hypervisor_pod,
)
from tensorfusion.domain.settings.controller_environment import ControllerEnvironment
from tensorfusion.domain.timestamps import format_rfc3339, parse_rfc3339

from .agent_runner import AgentRunner
from .conftest import DeleteLater
from .controller_replicas import Start, install_crds
from .controlplane import ControlPlane, eventually
from .nodes import FakeGpuNodes, node_status
from .test_controller_reconcilers import GPU, GPU_NODE, POD, POOL, V1, read, status

pytestmark = pytest.mark.cluster

PROVIDER: Any = resource_of("ProviderConfig")
H100 = "NVIDIA H100 80GB HBM3"


def simulation(run: str, node: str) -> str:
    entries = "".join(f"  - model: {H100}\n    vram: 80Gi\n    uuid: {uuid}\n"
                      for uuid in gpu_uuids(run, node))  # fmt: skip
    return f"gpus:\n{entries}"


def gpu_uuids(run: str, node: str) -> list[str]:
    return [f"GPU-{run}-{node[-1]}-{g}" for g in range(2)]


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in pod["spec"]["containers"][0]["env"]}  # fmt: skip


async def test_the_leader_keeps_one_agent_pod_per_gpu_node_and_agents_run_from_it(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    await install_crds(control_plane)
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="tensor-fusion-hypervisor-sa",
                                                         namespace=namespace)))  # fmt: skip
    run = secrets.token_hex(3)
    pool = f"tf-{run}-pool"
    labels = {"tf-run": run}
    cheap = (await fake_gpu_nodes(1, labels={**labels, "tf-tier": "cheap"}))[0].metadata
    plain = (await fake_gpu_nodes(1, labels=labels))[0].metadata
    down = (await fake_gpu_nodes(1, labels=labels, ready=False))[0].metadata
    assert cheap and plain and down and cheap.name and plain.name and down.name
    nodes, down_name = [cheap.name, plain.name], down.name
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "tf-run", "operator": "In", "values": [run]}]}]}  # fmt: skip
    template = {"template": {"spec": {"containers": [
        {"name": "hypervisor", "env": [{"name": "TF_LOG_LEVEL", "value": "debug"}]}]}}}  # fmt: skip
    spec = {
        "nodeManagerConfig": {"nodeSelector": selector, "isolationModeRules": [
            {"mode": "shared", "selector": {"matchLabels": {"tf-tier": "cheap"}}}]},
        "componentConfig": {"hypervisor": {"image": "example.com/agent:test", "portNumber": 8123,
                                           "podTemplate": template}},
    }  # fmt: skip
    await kube.create(POOL({"apiVersion": V1, "kind": "GPUPool", "metadata": {"name": pool},
                            "spec": spec}))  # fmt: skip
    cluster_objects(POOL, pool)
    metadata = [{"model": "H100 80GB HBM3", "fp16TFlops": "1000"}]
    await kube.create(
        PROVIDER(
            {
                "apiVersion": V1,
                "kind": "ProviderConfig",
                "metadata": {"name": f"a-{run}-nvidia"},
                "spec": {"vendor": "NVIDIA", "hardwareMetadata": metadata},
            }
        )
    )
    cluster_objects(PROVIDER, f"a-{run}-nvidia")
    for name in (*nodes, down_name):
        cluster_objects(GPU_NODE, name)
        for uuid in gpu_uuids(run, name):
            cluster_objects(GPU, uuid.lower())
    controller = replicas("replica-h", "-leader-elect", "-agent-readiness", "heartbeat")
    files = tmp_path / "simulated"
    files.mkdir()

    def sim_file(node: str) -> Path:
        path = files / f"{node}.yaml"
        path.write_text(simulation(run, node))
        return path

    metrics = {"TF_METRICS_WRITE_URL": f"http://{controller.ip}:{controller.api_port}"}
    runner = AgentRunner(control_plane, kube, namespace, tmp_path, sim_file, metrics)
    async with runner.running():

        def logs() -> list[Any]:
            return [controller.component, *runner.components()]

        async def pods() -> list[dict[str, Any]] | None:
            found = [await read(kube, POD, hypervisor_pod_name(n), namespace) for n in nodes]
            started = all(runner.agents.get(n) for n in nodes)
            return [p for p in found if p] if all(found) and started else None

        created = await eventually(pods, what="an agent pod and agent per Ready GPUNode",
                                   components=logs())  # fmt: skip

        # -- the pods as §10 renders them -------------------------------------------------
        env = ControllerEnvironment.from_mapping(controller.component.env)
        settings = HypervisorPodSettings(
            namespace=namespace, default_image=HYPERVISOR_IMAGE,
            isolation_policy=env.isolation_policy.value, metrics=metrics_write_target(env),
        )  # fmt: skip
        providers: list[dict[str, Any]] = [p.to_dict() async for p in kube.list(PROVIDER)]
        for pod, node in zip(created, nodes, strict=True):
            meta, pod_spec = pod["metadata"], pod["spec"]
            gpu_node = await read(kube, GPU_NODE, node)
            node_obj = await read(kube, Node, node)
            pool_obj = await read(kube, POOL, pool)
            assert gpu_node and node_obj and pool_obj
            owners = [(o["kind"], o["name"], o["uid"], o.get("controller"))
                      for o in meta["ownerReferences"]]  # fmt: skip
            assert owners == [("GPUNode", node, gpu_node["metadata"]["uid"], True),
                              ("Node", node, node_obj["metadata"]["uid"], None)]  # fmt: skip
            assert meta["labels"][KEYS.component] == "hypervisor"
            assert meta["labels"][KEYS.pool_member_label(pool)] == "true"
            assert (pod_spec["nodeName"], pod_spec["hostPID"], pod_spec["hostNetwork"]) == (
                node, True, True)  # fmt: skip
            assert (pod_spec["dnsPolicy"], pod_spec["priorityClassName"],
                    pod_spec["serviceAccountName"]) == ("ClusterFirstWithHostNet",
                    "system-node-critical", "tensor-fusion-hypervisor-sa")  # fmt: skip
            assert pod_spec["containers"][0]["image"] == "example.com/agent:test"
            env_vars = env_of(pod)
            mode = "shared" if node == cheap.name else "soft"
            assert {k: env_vars[k] for k in ("GPU_NODE_NAME", "POD_NAME", "TENSOR_FUSION_POOL_NAME",
                                             "HYPERVISOR_PORT", "TF_ISOLATION_MODE",
                                             "TF_ISOLATION_MODE_POLICY", "DETECT_IN_USED_GPUS",
                                             "TF_LOG_LEVEL")} == {
                "GPU_NODE_NAME": node, "POD_NAME": {"fieldRef": {"apiVersion": "v1",
                                                                 "fieldPath": "metadata.name"}},
                "TENSOR_FUSION_POOL_NAME": pool, "HYPERVISOR_PORT": "8123",
                "TF_ISOLATION_MODE": mode, "TF_ISOLATION_MODE_POLICY": "Static",
                "DETECT_IN_USED_GPUS": "false", "TF_LOG_LEVEL": "debug",
            }  # fmt: skip
            assert json.loads(env_vars["TF_PROVIDER_HARDWARE_METADATA"]) == metadata
            assert f".{namespace}.svc:" in env_vars["TF_METRICS_WRITE_URL"]
            rendered = render_hypervisor_pod(HypervisorInputs(
                gpu_node=gpu_node, node=node_obj, pool=pool_obj,
                hardware_metadata=hardware_metadata_json(providers, "NVIDIA"),
            ), settings)  # fmt: skip
            assert meta["labels"][KEYS.pod_template_hash] == (
                rendered["metadata"]["labels"][KEYS.pod_template_hash])  # fmt: skip

        # -- the agents run from the pods' env: GPUs Running ------------------------------
        async def all_running() -> bool:
            for node in nodes:
                if status(await read(kube, GPU_NODE, node)).get("phase") != "Running":
                    return False
                for uuid in gpu_uuids(run, node):
                    gpu = status(await read(kube, GPU, uuid.lower()))
                    mode = "shared" if node == cheap.name else "soft"
                    if (gpu.get("phase"), gpu.get("isolationMode")) != ("Running", mode):
                        return False
            return True

        await eventually(all_running, what="GPUNodes and GPUs Running", components=logs())
        gpu = status(await read(kube, GPU, gpu_uuids(run, nodes[0])[0].lower()))
        assert gpu["capacity"]["tflops"] == "1k"  # the ProviderConfig's, through the pod env

        # -- a deleted pod is recreated; a heartbeat older than it does not count ---------
        first = created[0]["metadata"]["uid"]
        runner.held.add(nodes[0])  # the new pod's agent starts when the test says so
        await kube.delete(POD, hypervisor_pod_name(nodes[0]), namespace=namespace, grace_period=0)

        async def recreated() -> dict[str, Any] | None:
            pod = await read(kube, POD, hypervisor_pod_name(nodes[0]), namespace)
            stopped = [agent.uid for agent in runner.stopped] == [first]  # its process ended
            return pod if pod and pod["metadata"]["uid"] != first and stopped else None

        pod = await eventually(recreated, what="the pod recreated, the old agent stopped",
                               components=logs())  # fmt: skip
        created_at = parse_rfc3339(pod["metadata"]["creationTimestamp"])
        assert created_at is not None
        # The stopped agent's last beat, fresh but from before the new pod: not ready.
        stale = {"lastHeartbeatTime": format_rfc3339(created_at - 2)}
        await kube.patch(GPU_NODE.Status, nodes[0], {"status": {"hypervisorStatus": stale}},
                         patch_type=PatchType.MERGE)  # fmt: skip

        async def pending() -> bool:
            return status(await read(kube, GPU_NODE, nodes[0])).get("phase") == "Pending"

        await eventually(pending, what="the GPUNode Pending: no beat since its new pod",
                         components=logs())  # fmt: skip
        await runner.release(nodes[0])

        async def beats_after_the_new_pod() -> bool:
            node_status_now = status(await read(kube, GPU_NODE, nodes[0]))
            beat = parse_rfc3339(
                node_status_now.get("hypervisorStatus", {}).get("lastHeartbeatTime")
            )
            fresh = beat is not None and beat >= created_at
            return fresh and node_status_now.get("phase") == "Running"

        await eventually(beats_after_the_new_pod, what="a heartbeat of the new agent",
                         components=logs())  # fmt: skip
        assert runner.started[nodes[0]] == [first, pod["metadata"]["uid"]]

        # -- a NotReady node has no pod, until it is Ready --------------------------------
        assert await read(kube, GPU_NODE, down_name) is not None
        assert await read(kube, POD, hypervisor_pod_name(down_name), namespace) is None
        await kube.patch(Node.Status, down_name, {"status": node_status({}, ready=True)},
                         patch_type=PatchType.MERGE)  # fmt: skip

        async def ready_gets_a_pod() -> bool:
            return await read(kube, POD, hypervisor_pod_name(down_name), namespace) is not None

        await eventually(ready_gets_a_pod, what="a pod once the node is Ready", components=logs())
