"""Smoke tests of the test control plane itself: scheduling, admission webhooks, CRDs, tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    WebhookClientConfig,
)
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from .controlplane import ControlPlane, StartScheduler, eventually, http_extender
from .nodes import FakeGpuNodes
from .servers import admission_response, serve

pytestmark = pytest.mark.cluster

DATA = Path(__file__).parent / "data"
IMAGE = "pause:3.10"  # never pulled: there is no kubelet


def pod(name: str, namespace: str, *, scheduler: str | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, labels={"app": name}),
        spec=PodSpec(containers=[Container(name="main", image=IMAGE)], schedulerName=scheduler),
    )


async def test_deployment_pods_are_bound_to_fake_nodes_by_kube_scheduler(
    kube: AsyncClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, kube_scheduler: object
) -> None:
    nodes = {node.metadata.name for node in await fake_gpu_nodes(2) if node.metadata}
    labels = {"app": "smoke"}
    await kube.create(
        Deployment(
            metadata=ObjectMeta(name="smoke", namespace=namespace),
            spec=DeploymentSpec(
                replicas=3,
                selector=LabelSelector(matchLabels=labels),
                template=PodTemplateSpec(
                    metadata=ObjectMeta(labels=labels),
                    spec=PodSpec(containers=[Container(name="main", image=IMAGE)]),
                ),
            ),
        )
    )

    async def bound_pods() -> dict[str, str] | None:
        pods = [p async for p in kube.list(Pod, namespace=namespace, labels={"app": "smoke"})]
        placement = {
            p.metadata.name: p.spec.nodeName
            for p in pods
            if p.metadata and p.metadata.name and p.spec and p.spec.nodeName
        }
        return placement if len(pods) == 3 and len(placement) == 3 else None

    placement = await eventually(bound_pods, what="3 pods of the Deployment bound to nodes")
    assert set(placement.values()) <= nodes


async def test_scheduler_calls_the_http_extender_of_its_configuration(
    kube: AsyncClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    start_scheduler: StartScheduler,
) -> None:
    created = await fake_gpu_nodes(3)
    names = sorted(node.metadata.name for node in created if node.metadata and node.metadata.name)
    chosen = names[-1]
    calls: list[dict[str, Any]] = []

    async def filter_nodes(request: web.Request) -> web.Response:
        arguments = await request.json()
        calls.append(arguments)
        offered = arguments.get("NodeNames") or []
        failed = {name: "not the chosen one" for name in offered if name != chosen}
        kept = [name for name in offered if name == chosen]
        return web.json_response({"NodeNames": kept, "FailedNodes": failed, "Error": ""})

    app = web.Application()
    app.router.add_post("/scheduler/filter", filter_nodes)
    async with serve(app) as url:
        await start_scheduler(
            profiles=[{"schedulerName": "smoke-scheduler"}],
            extenders=[http_extender(f"{url}/scheduler", filter_verb="filter")],
        )
        await kube.create(pod("extended", namespace, scheduler="smoke-scheduler"))

        async def node_of_pod() -> str | None:
            found = await kube.get(Pod, "extended", namespace=namespace)
            return found.spec.nodeName if found.spec else None

        assert await eventually(node_of_pod, what="pod bound by smoke-scheduler") == chosen
    pod_names = {call["Pod"]["metadata"]["name"] for call in calls}
    assert pod_names == {"extended"}
    assert set(calls[0]["NodeNames"]) == set(names)


async def test_mutating_webhook_on_loopback_is_called_and_its_patch_applied(
    kube: AsyncClient, namespace: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    reviews: list[dict[str, Any]] = []
    label = "smoke.testenv.tensor-fusion.ai/mutated"

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        reviews.append(review)
        patch = [
            {"op": "add", "path": "/metadata/labels/" + label.replace("/", "~1"), "value": "yes"}
        ]
        return web.json_response(admission_response(review, patch=patch))

    app = web.Application()
    app.router.add_post("/mutate-v1-pod", mutate)
    serving = control_plane.ca.issue_server().server_context(tmp_path, "webhook")
    configuration_name = f"smoke-{namespace}"
    async with serve(app, serving) as url:
        await kube.create(
            MutatingWebhookConfiguration(
                metadata=ObjectMeta(name=configuration_name),
                webhooks=[
                    MutatingWebhook(
                        name="mutate.smoke.testenv.tensor-fusion.ai",
                        clientConfig=WebhookClientConfig(
                            url=f"{url}/mutate-v1-pod", caBundle=control_plane.ca.bundle_base64
                        ),
                        rules=[
                            RuleWithOperations(
                                apiGroups=[""],
                                apiVersions=["v1"],
                                operations=["CREATE"],
                                resources=["pods"],
                                scope="Namespaced",
                            )
                        ],
                        namespaceSelector=LabelSelector(
                            matchLabels={"kubernetes.io/metadata.name": namespace}
                        ),
                        admissionReviewVersions=["v1"],
                        sideEffects="None",
                        failurePolicy="Fail",
                        timeoutSeconds=10,
                    )
                ],
            )
        )
        try:
            # The apiserver picks up a new webhook configuration asynchronously: dry-run
            # creations show when it is in effect.
            async def webhook_active() -> bool:
                probe = await kube.create(pod("probe", namespace), dry_run=True)
                return bool(probe.metadata and label in (probe.metadata.labels or {}))

            await eventually(webhook_active, what="the webhook configuration to take effect")
            reviews.clear()
            created = await kube.create(pod("mutated", namespace))
        finally:
            await kube.delete(MutatingWebhookConfiguration, configuration_name)

    assert created.metadata is not None
    assert (created.metadata.labels or {}).get(label) == "yes"
    stored = await kube.get(Pod, "mutated", namespace=namespace)
    assert stored.metadata is not None
    assert (stored.metadata.labels or {}).get(label) == "yes"
    assert [r["request"]["name"] for r in reviews] == ["mutated"]
    assert reviews[0]["request"]["namespace"] == namespace
    assert reviews[0]["request"]["operation"] == "CREATE"


async def test_crd_applied_from_a_file_is_served(
    kube: AsyncClient, namespace: str, control_plane: ControlPlane
) -> None:
    crd_file = DATA / "widgets-crd.yaml"
    await control_plane.kubectl("apply", "-f", str(crd_file))
    try:

        async def established() -> bool:
            crd = await kube.get(CustomResourceDefinition, "widgets.smoke.testenv.tensor-fusion.ai")
            conditions = crd.status.conditions if crd.status else None
            return any(c.type == "Established" and c.status == "True" for c in conditions or [])

        await eventually(established, what="the Widget CRD to be Established")
        widget_kind = create_namespaced_resource(
            "smoke.testenv.tensor-fusion.ai", "v1", "Widget", "widgets"
        )
        await kube.create(
            widget_kind(metadata=ObjectMeta(name="small", namespace=namespace), spec={"size": 2})
        )
        fetched = await kube.get(widget_kind, "small", namespace=namespace)
        assert fetched["spec"] == {"size": 2}

        listed = json.loads(
            await control_plane.kubectl("get", "widgets", "-n", namespace, "-o", "json")
        )
        assert [item["metadata"]["name"] for item in listed["items"]] == ["small"]

        with pytest.raises(ApiError) as rejected:
            await kube.create(
                widget_kind(
                    metadata=ObjectMeta(name="invalid", namespace=namespace), spec={"size": 0}
                )
            )
        assert rejected.value.status.code == 422
    finally:
        await control_plane.kubectl("delete", "-f", str(crd_file), "--wait=false")


async def test_kubectl_and_helm_match_the_cluster(control_plane: ControlPlane) -> None:
    expected = control_plane.binaries.kubernetes_version
    versions = json.loads(await control_plane.kubectl("version", "-o", "json"))
    assert versions["clientVersion"]["gitVersion"] == expected
    assert versions["serverVersion"]["gitVersion"] == expected

    helm_version = control_plane.binaries.versions["HELM_VERSION"]
    assert (await control_plane.helm("version", "--short")).startswith(helm_version)
    assert json.loads(await control_plane.helm("list", "--all-namespaces", "-o", "json")) == []
