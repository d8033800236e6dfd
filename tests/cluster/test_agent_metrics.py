"""A node agent's metrics through the controller's embedded store: the agent (simulated GPUs, a
hot GPU and a throttled worker, `TF_METRICS_INTERVAL=1s`) writes to the leader's write path with
a real token of `tensor-fusion-hypervisor-sa` from a file; its `tf_gpu_usage`, `tf_worker_usage`
(an idle worker included) and `tf_system_log` rows reach the store, and the default rules
`GPUTemperatureHigh` and `WorkerTFlopsThrottled` fire on the leader and at a real Alertmanager.

The store has no query endpoint, so rows are read back by probe rules whose text columns become
alert labels. The default rules run as shipped except their evaluation interval, 10 s instead
of 30 s (still at least twice the sampling interval, metrics.md §2), to keep the test short."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from lightkube import AsyncClient

from tensorfusion.adapters.package_data import default_alert_rule_definitions
from tensorfusion.devenv.replica_pods import release_ca_file
from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.settings.controller_environment import (
    DEFAULT_HYPERVISOR_SERVICE_ACCOUNT,
    DEFAULT_WEBHOOK_SECRET,
)

from ..integration.loopback_peers import alertmanagers_on
from .conftest import DeleteLater
from .controller_replicas import Replica, Start
from .controlplane import ControlPlane, eventually, free_port
from .nodes import FakeGpuNodes
from .sealed_workers import create_sealed_worker
from .test_controller_process_alerts import notices, service_account_token
from .test_controller_reconcilers import GPU, GPU_NODE, POD, read, worker_pod
from .test_node_agent import H100, pool_of_one_node, start_agent

pytestmark = pytest.mark.cluster

ALERTMANAGER = "127.0.0.8"
RULES_UNDER_TEST = ("GPUTemperatureHigh", "WorkerTFlopsThrottled")


def simulation(hot: str, cool: str, busy: str) -> str:
    return f"""
gpus:
  - model: {H100}
    vram: 80Gi
    uuid: {hot}
    usage: {{compute: 50, memoryUsed: 40Gi, temperature: 95}}
    workers:
      {busy}: {{compute: 30, memoryUsed: 8Gi, computeThrottledPerSecond: 5}}
  - model: {H100}
    vram: 80Gi
    uuid: {cool}
    usage: {{compute: 5, temperature: 40}}
"""


def probe(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "query": query, "evaluationInterval": "10s", "consecutiveCount": 1,
            "severity": "P3", "alertTargetInstance": name}  # fmt: skip


def write_config(directory: Path, hot: str, idle: str) -> Path:
    """The default rules (the two under test every 10 s) and three probes of the agent's rows."""
    rules = default_alert_rule_definitions()
    for rule in rules:
        if rule["name"] in RULES_UNDER_TEST:
            rule["evaluationInterval"] = "10s"
    rules += [
        probe("ProbeGPURow", "SELECT uuid, node, pool, "
              "CAST(max(compute_tflops) AS VARCHAR) AS tflops, "
              "CAST(max(memory_percentage) AS VARCHAR) AS memory_percent FROM tf_gpu_usage "
              f"WHERE uuid = '{hot}' AND {{{{ .Conditions }}}} GROUP BY uuid, node, pool"),
        probe("ProbeIdleWorkerRow", "SELECT worker, uuid, workload, namespace, "
              "CAST(max(compute_throttled_cnt) AS VARCHAR) AS throttled, "
              "CAST(max(memory_bytes) AS VARCHAR) AS memory FROM tf_worker_usage "
              f"WHERE worker = '{idle}' AND {{{{ .Conditions }}}} "
              "GROUP BY worker, uuid, workload, namespace"),
        probe("ProbeAgentLog", "SELECT component, pod, level FROM tf_system_log "
              "WHERE message LIKE 'node agent of%' GROUP BY component, pod, level"),
    ]  # fmt: skip
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": rules}))
    os.replace(temporary, directory / "config.yaml")
    return directory / "config.yaml"


async def firing(replica: Replica) -> dict[str, list[dict[str, str]]] | None:
    """The leader's firing alerts' labels by rule; None while it is not leading."""
    try:
        code, text = await replica.get("/api/alerts")
    except OSError:
        return None
    body = orjson.loads(text) if code == 200 else {}
    if not body.get("replica", {}).get("leader"):
        return None
    return {r["name"]: [f["labels"] for f in r.get("firing", [])] for r in body["rules"]}


def has(alerts: list[dict[str, str]], **labels: str) -> bool:
    return any(all(a.get(k) == v for k, v in labels.items()) for a in alerts)


async def test_agent_rows_reach_the_embedded_store_and_fire_the_default_rules(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    run, pool, node = await pool_of_one_node(control_plane, kube, fake_gpu_nodes, cluster_objects)
    hot, cool = f"GPU-{run}-HOT", f"GPU-{run}-COOL"
    for name in (hot, cool):
        cluster_objects(GPU, name.lower())
    token = await service_account_token(kube, namespace, DEFAULT_HYPERVISOR_SERVICE_ACCOUNT)
    token_file = tmp_path / "sa-token"
    token_file.write_text(token)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    config = write_config(config_dir, hot.lower(), "idle")

    async with alertmanagers_on((ALERTMANAGER,), tmp_path / "alertmanager") as peers:
        alertmanager = f"http://{ALERTMANAGER}:{peers.port}"
        controller = replicas("replica-a", "-leader-elect", "-agent-readiness", "heartbeat",
                              "-enable-alert", "-dynamic-config", str(config),
                              "-alert-manager-addr", alertmanager)  # fmt: skip

        async def gpu_node() -> bool:
            return await read(kube, GPU_NODE, node) is not None

        await eventually(gpu_node, what="the controller's GPUNode",
                         components=[controller.component])  # fmt: skip
        busy = worker_pod("busy", namespace, pool, node, hot.lower())
        assert busy.metadata is not None and busy.metadata.labels is not None
        busy.metadata.labels[KEYS.workload] = "infer"
        idle = worker_pod("idle", namespace, pool, node, cool.lower())
        assert idle.spec is not None and idle.spec.containers[0].resources is not None
        index, value = encode_index(2)
        idle.spec.containers[0].resources.limits = {index: str(value)}
        for pod in (busy, idle):
            await create_sealed_worker(kube, pod)
        sim = tmp_path / "gpus.yaml"
        sim.write_text(simulation(hot, cool, "busy"))
        # The agent writes as its pod would: to the peer port, verified with the release CA.
        ca = await release_ca_file(kube, namespace=namespace, secret=DEFAULT_WEBHOOK_SECRET,
                                   path=tmp_path / "peer-ca.crt")  # fmt: skip
        agent = start_agent(control_plane, tmp_path, node, pool, sim, free_port(),
                            TF_METRICS_INTERVAL="1s",
                            TF_METRICS_WRITE_URL=f"https://{controller.ip}:{controller.peer_port}",
                            TF_METRICS_WRITE_CA_FILE=str(ca),
                            TF_METRICS_WRITE_TOKEN_FILE=str(token_file),
                            POD_NAME=f"hypervisor-{node}")  # fmt: skip
        logs = [controller.component, agent]
        try:
            # -- rows in the store, read back by the probes ----------------------------------
            async def rows_stored() -> dict[str, list[dict[str, str]]] | None:
                found = await firing(controller)
                if found is None:
                    return None
                stored = (
                    has(found["ProbeGPURow"], uuid=hot.lower(), node=node, pool=pool,
                        tflops="494.75", memory_percent="50.0")
                    and has(found["ProbeIdleWorkerRow"], uuid=cool.lower(), workload="unknown",
                            namespace=namespace, throttled="0", memory="0")
                    and has(found["ProbeAgentLog"], component="hypervisor",
                            pod=f"hypervisor-{node}", level="info")
                )  # fmt: skip
                return found if stored else None

            await eventually(rows_stored, what="the agent's rows read back by the probes",
                             timeout=90, components=logs)  # fmt: skip

            # -- the default rules fire on the leader and at the Alertmanager ----------------
            async def fired() -> dict[str, list[dict[str, str]]] | None:
                found = await firing(controller)
                if found is None:
                    return None
                hot_gpu = has(found["GPUTemperatureHigh"], uuid=hot.lower(), node=node, pool=pool)
                throttled = has(found["WorkerTFlopsThrottled"], worker="busy", workload="infer",
                                uuid=hot.lower(), node=node)  # fmt: skip
                notified = all(notices(r, rule, "firing") for r in peers.receivers
                               for rule in RULES_UNDER_TEST)  # fmt: skip
                return found if hot_gpu and throttled and notified else None

            found = await eventually(fired, what="GPUTemperatureHigh and WorkerTFlopsThrottled",
                                     timeout=120, components=logs)  # fmt: skip
            assert len(found["GPUTemperatureHigh"]) == 1, "only the hot GPU"
            assert len(found["WorkerTFlopsThrottled"]) == 1, "only the throttled worker"
        finally:
            agent.stop()
            for name in ("busy", "idle"):
                await kube.delete(POD, name, namespace=namespace, grace_period=0)
