"""Admission reads a pod's owners through the real API server: a ReplicaSet made by
kube-controller-manager for a Deployment, and None for one that is gone."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet

from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.admission.cluster_sources import ClusterAdmissionSources

from .controlplane import eventually

pytestmark = pytest.mark.cluster


class Empty:
    def list(self, namespace: str | None = None) -> Sequence[Mapping[str, Any]]:
        return []

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return None


async def test_owners_are_read_through_the_api(kube: AsyncClient, namespace: str) -> None:
    labels = {"app": "web"}
    await kube.create(Deployment(
        metadata=ObjectMeta(name="web", namespace=namespace),
        spec=DeploymentSpec(
            replicas=0, selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(metadata=ObjectMeta(labels=labels),
                                     spec=PodSpec(containers=[Container(name="c", image="x")])),
        ),
    ))  # fmt: skip

    async def replica_set() -> str | None:
        async for found in kube.list(ReplicaSet, namespace=namespace):
            if found.metadata and found.metadata.name:
                return found.metadata.name
        return None

    name = await eventually(replica_set, what="the Deployment's ReplicaSet")

    async def no_leader() -> str | None:
        return None

    sources = ClusterAdmissionSources(
        client=kube, pools=Empty(), profiles=Empty(), quotas=Empty(), gpus=Empty(),
        namespaces=Empty(), is_leader=lambda: False, take_index=lambda preview: 1,
        leader_address=no_leader, rng=random.Random(1),
        peer=PeerClient(ca=lambda: None, server_hostname=""),
    )  # fmt: skip
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "controller": True}
    owner = await sources.owner(namespace, ref)
    assert owner is not None and owner["metadata"]["name"] == name
    [parent] = owner["metadata"]["ownerReferences"]
    assert (parent["kind"], parent["name"]) == ("Deployment", "web")
    assert await sources.owner(namespace, {**ref, "name": "gone"}) is None
