"""Admission's writes against the real API server: concurrent admissions of a ReplicaSet's
pods with `enabled-replicas` count exactly N on the owner, the TensorFusionWorkload is created,
and a dry run writes nothing."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.apps_v1 import ReplicaSetSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import ReplicaSet

from tensorfusion.adapters.kube.custom_resources import resource_of
from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.admission.admitter import ClusterAdmitter
from tensorfusion.admission.cluster_sources import ClusterAdmissionSources
from tensorfusion.admission.facts_gathering import AdmissionSettings
from tensorfusion.domain.admission.decision import AdmissionOutcome
from tensorfusion.domain.admission.review import AdmissionRequest

from ..unit.admission.admission_builders import make_pod, make_pool, resources_ok
from .controller_replicas import install_crds
from .controlplane import ControlPlane

pytestmark = pytest.mark.cluster

WORKLOAD: Any = resource_of("TensorFusionWorkload")


class Cache:
    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self.objects = objects

    def list(self, namespace: str | None = None) -> Sequence[Mapping[str, Any]]:
        return list(self.objects)

    def get(self, name: str, namespace: str = "") -> Mapping[str, Any] | None:
        return None


async def test_concurrent_admissions_count_exactly_n_and_write_the_workload(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str
) -> None:
    await install_crds(control_plane)
    labels = {"app": "web"}
    replica_set = await kube.create(ReplicaSet(
        metadata=ObjectMeta(name="web-rs", namespace=namespace),
        spec=ReplicaSetSpec(
            replicas=0, selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(metadata=ObjectMeta(labels=labels),
                                     spec=PodSpec(containers=[Container(name="c", image="x")])),
        ),
    ))  # fmt: skip
    assert replica_set.metadata is not None
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
             "uid": replica_set.metadata.uid, "controller": True}  # fmt: skip
    counter = itertools.count(1)

    async def no_leader() -> str | None:
        return None

    sources = ClusterAdmissionSources(
        client=kube, pools=Cache(make_pool()), profiles=Cache(), quotas=Cache(), gpus=Cache(),
        namespaces=Cache(), is_leader=lambda: True,
        take_index=lambda preview: next(counter) % 128 + 1,
        leader_address=no_leader, rng=random.Random(1),
        peer=PeerClient(ca=lambda: None, server_hostname=""),
    )  # fmt: skip
    admitter = ClusterAdmitter(kube, sources, AdmissionSettings())

    def request(i: int, dry_run: bool = False) -> AdmissionRequest:
        pod = make_pod(
            resources_ok(**{"enabled-replicas": "2"}),
            name=f"web-{i}",
            namespace=namespace,
            owner=owner,
            labels={"pod-template-hash": "abc"},
        )
        return AdmissionRequest(f"uid-{i}", "CREATE", namespace, f"web-{i}", pod,
                                dry_run=dry_run)  # fmt: skip

    decisions = await asyncio.gather(*(admitter.admit(request(i)) for i in range(6)))
    outcomes = sorted(d.outcome for d in decisions)
    assert outcomes.count(AdmissionOutcome.MUTATED) == 2, outcomes
    assert all(d.allowed for d in decisions)
    stored = await kube.get(ReplicaSet, "web-rs", namespace=namespace)
    assert stored.metadata is not None and stored.metadata.annotations is not None
    counts = {k: v for k, v in stored.metadata.annotations.items() if "tf-counter" in k}
    assert list(counts.values()) == ["2"], counts
    workloads = [w async for w in kube.list(WORKLOAD, namespace=namespace)]
    assert len(workloads) == 1

    dry = await admitter.admit(request(9, dry_run=True))
    assert dry.allowed
    again = await kube.get(ReplicaSet, "web-rs", namespace=namespace)
    assert again.metadata is not None
    assert again.metadata.resourceVersion == stored.metadata.resourceVersion, "a dry run wrote"
