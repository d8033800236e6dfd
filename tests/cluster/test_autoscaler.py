"""Issue 28: the autoscaler on the real control plane. A controller with `-enable-auto-scale` and
its embedded store; a node agent (simulated GPUs, `TF_METRICS_INTERVAL=1s`) whose worker uses 2%
of an H100 (about 19.8 TFLOPS) and 2 GiB while it asked 100 TFLOPS and 10 GiB; its workload
enables `autoSetResources` with a 10 s interval. Once 30 samples are stored, the worker is
resized in place: its request annotations, its GPU's `runningApps` entry and the GPU's
available TFLOPS follow, the workload's `status.recommendation` and condition say so, and an
Event `Resized` is recorded. The pod is never deleted or rebound. An external scaler on
loopback, called with the key of a Secret of the release namespace, resizes another."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Secret

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.domain.annotation_values import parse_tflops_milli
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.autoscaling.external_scaler import (
    KEY_NAMESPACES_ANNOTATION,
    KEY_URL_ANNOTATION,
)

from ..peer_tls import release_bundle, serving
from ..standins.external_scaler import ScalerServer
from .agent_pool import Pool, agent_pool
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane, eventually
from .nodes import FakeGpuNodes
from .test_controller_reconcilers import GPU, POD, read, status

pytestmark = pytest.mark.cluster

WORKLOAD: Any = resource_of("TensorFusionWorkload")


def _workload(name: str, namespace: str, pool: str, scaling: dict[str, Any]) -> Any:
    return WORKLOAD.from_dict({
        "apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolName": pool,
                 "resources": {"requests": {"tflops": "100", "vram": "10Gi"},
                               "limits": {"tflops": "100", "vram": "10Gi"}},
                 "autoScalingConfig": scaling},
    })  # fmt: skip


async def _resized(kube: AsyncClient, pool: Pool, name: str) -> dict[str, Any]:
    async def resized() -> bool:
        pod = await read(kube, POD, name, pool.namespace) or {}
        annotations = pod.get("metadata", {}).get("annotations") or {}
        return annotations.get(KEYS.tflops_request) not in (None, "100")

    await eventually(resized, what=f"{name}'s request resized", timeout=150,
                     components=pool.logs)  # fmt: skip
    return await read(kube, POD, name, pool.namespace) or {}


async def test_an_over_requested_worker_is_resized_in_place(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    async with agent_pool(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                                cluster_objects, tmp_path, {"busy": "infer"}) as pool:  # fmt: skip
        await kube.create(_workload("infer", namespace, pool.pool, {"autoSetResources": {
            "enable": True, "interval": "10s", "initialDelayPeriod": "0s",
            "historyDataPeriod": "10m"}}))  # fmt: skip
        uid = (await read(kube, POD, "busy", namespace) or {})["metadata"]["uid"]
        pod = await _resized(kube, pool, "busy")
        annotations = pod["metadata"]["annotations"]
        # 2% of 989.5 TFLOPS is 19.79; with the 15% margin about 22.76; 2 GiB x 1.15 is 2.3 GiB.
        tflops = parse_tflops_milli(annotations[KEYS.tflops_request])
        assert 20_000 < tflops < 26_000, annotations
        assert annotations[KEYS.vram_request] != "10Gi"
        assert pod["metadata"]["uid"] == uid and pod["spec"]["nodeName"] == pool.node

        async def gpu_follows() -> bool:
            entries = [p for app in status(await read(kube, GPU, pool.gpu)).get("runningApps")
                       or [] for p in app.get("pods") or []]  # fmt: skip
            return any(p.get("uid") == uid and p.get("requests", {}).get("tflops") ==
                       annotations[KEYS.tflops_request] for p in entries)  # fmt: skip

        await eventually(gpu_follows, what="the GPU's runningApps entry resized",
                         components=pool.logs)  # fmt: skip
        workload = await read(kube, WORKLOAD, "infer", namespace) or {}
        assert workload["status"]["recommendation"]["requests"]["tflops"] == annotations[
            KEYS.tflops_request]  # fmt: skip
        condition = next(c for c in workload["status"]["conditions"] if c["type"] == "AutoScaled")
        assert condition["reason"] == "Resized"
        events = [e async for e in kube.list(Event, namespace=namespace)
                  if e.involvedObject.name == "infer" and e.reason == "Resized"]  # fmt: skip
        assert events


async def test_an_external_scaler_resizes_with_the_key_of_its_secret(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
) -> None:
    """The controller reads the API key from a Secret of its namespace that allows the
    scaler's URL, posts the workload and its usage over HTTPS to a small local scaler, and
    applies its answer in place."""
    bundle = release_bundle("127.0.0.1")
    server = ScalerServer(serving(bundle), answer={
        "recommendation": {"requests": {"tflops": "40", "vram": "4Gi"},
                           "limits": {"tflops": "50", "vram": "4Gi"}},
        "reason": "the scaler says so"})  # fmt: skip
    url = await server.start()
    key = secrets.token_urlsafe(24)
    await kube.create(Secret(
        metadata=ObjectMeta(name="scaler-key", namespace=namespace,
                            annotations={KEY_URL_ANNOTATION: url,
                                         KEY_NAMESPACES_ANNOTATION: namespace}),
        stringData={"api-key": key, "ca.crt": (bundle.ca_pem or b"").decode()},
    ))  # fmt: skip
    try:
        async with agent_pool(
            control_plane,
            kube,
            namespace,
            replicas,
            fake_gpu_nodes,
            cluster_objects,
            tmp_path,
            {"ext": "scaled"},
        ) as pool:
            await kube.create(_workload("scaled", namespace, pool.pool, {"externalScaler": {
                "enable": True, "url": url, "interval": "10s", "initialDelayPeriod": "0s",
                "apiKeySecretRef": {"name": "scaler-key", "namespace": namespace}}}))  # fmt: skip
            pod = await _resized(kube, pool, "ext")
            annotations = pod["metadata"]["annotations"]
            assert (annotations[KEYS.tflops_request], annotations[KEYS.tflops_limit]) == (
                "40", "50")  # fmt: skip
            authorization, body = server.seen[0]
            assert authorization == f"Bearer {key}"
            assert body["workload"] == {"namespace": namespace, "name": "scaled",
                                        "pool": pool.pool}  # fmt: skip
            assert body["current"]["requests"] == {"tflops": "100", "vram": "10Gi"}
            workload = await read(kube, WORKLOAD, "scaled", namespace) or {}
            condition = next(c for c in workload["status"]["conditions"]
                             if c["type"] == "AutoScaled")  # fmt: skip
            assert (condition["reason"], condition["message"]) == (
                "Resized", "external scaler: the scaler says so")  # fmt: skip
            assert key not in str(workload)
    finally:
        await server.stop()
        await kube.delete(Secret, "scaler-key", namespace=namespace)
