"""A controller replica whose pod webhook the real API server calls, for the cluster tier.

`start_webhook` installs the CRDs and a GPUPool, starts controller replicas that serve the
webhook (HTTPS on one port, each on its own loopback IP, certificate issued for those IPs), and
registers a MutatingWebhookConfiguration as the chart renders it: `objectSelector`
`tensor-fusion.ai/enabled In ["true"]` in normal mode, none in a migration mode. Its
`namespaceSelector` admits the test namespace only, so other tests are not disturbed. The API
server calls the first replica, or `url_host` when a test puts something in between.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import LabelSelector, LabelSelectorRequirement, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.scheduling_v1 import PriorityClass

from tensorfusion.adapters.kube.custom_resources import resource_of

from ..unit.admission.admission_builders import make_pool
from .conftest import DeleteLater
from .controller_replicas import Replica, Start, install_crds
from .controlplane import Component, ControlPlane, eventually, free_port

POOL: Any = resource_of("GPUPool")
WEBHOOK_NAME = "mpod.tensor-fusion.ai"
#: The priority classes the chart installs (api.md §7).
PRIORITY_CLASSES = {"tensor-fusion-critical": 100000, "tensor-fusion-high": 10000,
                    "tensor-fusion-medium": 0}  # fmt: skip


async def create_priority_classes(kube: AsyncClient, cluster_objects: DeleteLater) -> None:
    """The chart's priority classes: the API server's Priority admission refuses a pod naming a
    class that does not exist. Deleted after the test when this test created them."""
    for name, value in PRIORITY_CLASSES.items():
        try:
            await kube.create(PriorityClass(metadata=ObjectMeta(name=name), value=value,
                                            globalDefault=False))  # fmt: skip
        except ApiError as error:
            if error.status.code != 409:
                raise
            continue
        cluster_objects(PriorityClass, name)


async def wait_ready(replica: Replica, components: Sequence[Component]) -> None:
    """Until `/readyz` of the replica answers 200 (its webhook has its certificate)."""

    async def ready() -> bool:
        try:
            code, _ = await replica.get("/readyz", health=True)
        except OSError:
            return False
        return code == 200

    await eventually(ready, what=f"{replica.component.name} ready", components=components)


@dataclass
class WebhookCluster:
    """Replicas serving the webhook, the pool and the configuration the API server uses."""

    replicas: list[Replica]
    release: str
    pool: str
    configuration: str
    port: int

    @property
    def replica(self) -> Replica:
        return self.replicas[0]


async def register_webhook(
    kube: AsyncClient,
    namespace: str,
    cluster_objects: DeleteLater,
    *,
    release: str,
    host: str,
    port: int,
    migration: bool = False,
    components: Sequence[Component] = (),
) -> str:
    """The chart's MutatingWebhookConfiguration (admission.md §1) calling
    `https://<host>:<port>/mutate-v1-pod` for the test namespace only; waits for the caBundle
    the controller sets; returns its name."""
    configuration = f"{release}-mutating-webhook"
    enabled = LabelSelector(matchExpressions=[LabelSelectorRequirement(
        key="tensor-fusion.ai/enabled", operator="In", values=["true"])])  # fmt: skip
    await kube.create(MutatingWebhookConfiguration(
        metadata=ObjectMeta(name=configuration),
        webhooks=[MutatingWebhook(
            name=WEBHOOK_NAME, admissionReviewVersions=["v1"], sideEffects="NoneOnDryRun",
            failurePolicy="Fail", timeoutSeconds=10, reinvocationPolicy="Never",
            clientConfig=WebhookClientConfig(url=f"https://{host}:{port}/mutate-v1-pod"),
            objectSelector=None if migration else enabled,
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

    await eventually(ca_set, what="the caBundle set by the controller", components=components)
    return configuration


async def start_webhook(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    cluster_objects: DeleteLater,
    *,
    count: int = 1,
    migration: bool = False,
    env: Mapping[str, str] | None = None,
    flags: Sequence[str] = (),
    pool_spec: Mapping[str, Any] | None = None,
    url_host: str | None = None,
    extra_hosts: Sequence[str] = (),
) -> WebhookCluster:
    """Replicas serving the webhook, registered with the API server; waits until the caBundle
    is set and every replica is ready."""
    await install_crds(control_plane)
    release = f"tf-{secrets.token_hex(3)}"
    pool = make_pool(f"{release}-shared", spec=pool_spec)
    await kube.create(POOL.from_dict(pool))
    cluster_objects(POOL, pool["metadata"]["name"])
    port = free_port()
    started: list[Replica] = []
    hosts = [f"127.0.0.{i + 2}" for i in range(count)] + list(extra_hosts)
    for i in range(count):
        started.append(replicas(
            f"replica-{i}", *flags,
            env={"TF_RELEASE_FULLNAME": release, "WEBHOOK_PORT": str(port),
                 "WEBHOOK_CERT_EXTRA_HOSTS": ",".join(hosts), **(env or {})},
        ))  # fmt: skip
    host = url_host or started[0].ip
    components = [r.component for r in started]
    configuration = await register_webhook(
        kube, namespace, cluster_objects, release=release, host=host, port=port,
        migration=migration, components=components,
    )  # fmt: skip
    for replica in started:
        await wait_ready(replica, components)
    return WebhookCluster(started, release, pool["metadata"]["name"], configuration, port)
