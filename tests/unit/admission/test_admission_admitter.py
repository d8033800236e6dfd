"""The typical pod makes no API call: its TensorFusionWorkload, found in the replica's cache as
the admission would write it, is not read nor written again; a cached workload that differs
goes to the API server (here unreachable, so the admission is a 503). The pod index is taken
only for a pod that passed the pipeline, previewed on a dry run."""

from __future__ import annotations

import random
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from tensorfusion.adapters.tls.peer_client import PeerClient
from tensorfusion.admission.admitter import ClusterAdmitter
from tensorfusion.admission.cluster_sources import ClusterAdmissionSources
from tensorfusion.admission.facts_gathering import AdmissionSettings
from tensorfusion.admission.webhook_app import TransientAdmissionError
from tensorfusion.domain.admission.review import AdmissionRequest

from .admission_builders import make_pod, make_pool, resources_ok
from .test_admission_cluster_sources import Cache


def admitter(workloads: Cache, taken: list[bool] | None = None) -> ClusterAdmitter:
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    })  # fmt: skip
    unreachable = AsyncClient(config=config)

    async def no_leader() -> str | None:
        return None

    def take(preview: bool) -> int:
        if taken is not None:
            taken.append(preview)
        return 7

    sources = ClusterAdmissionSources(
        client=unreachable, pools=Cache(make_pool()), profiles=Cache(), quotas=Cache(),
        gpus=Cache(), namespaces=Cache(), is_leader=lambda: True, take_index=take,
        leader_address=no_leader, rng=random.Random(1),
        peer=PeerClient(ca=lambda: None, server_hostname=""),
    )  # fmt: skip
    return ClusterAdmitter(unreachable, sources, AdmissionSettings(), workloads=workloads)


def request() -> AdmissionRequest:
    pod = make_pod(resources_ok(), name="web-1", namespace="team")
    return AdmissionRequest("uid-1", "CREATE", "team", "web-1", pod)


async def written_workload() -> dict[str, Any]:
    """The workload as the admission writes it (from the decision of a dry run)."""
    dry = AdmissionRequest("uid-0", "CREATE", "team", "web-1", request().object, dry_run=True)
    decision = await admitter(Cache()).admit(dry)
    assert decision.workload is not None
    return dict(decision.workload.body)


async def test_a_cached_workload_as_wanted_means_no_api_call() -> None:
    workload = await written_workload()
    decision = await admitter(Cache(dict(workload))).admit(request())
    assert decision.allowed and decision.patch


async def test_a_cached_workload_that_differs_is_written_through_the_api() -> None:
    workload = await written_workload()
    workload["spec"] = {**workload["spec"], "qos": "critical"}
    with pytest.raises(TransientAdmissionError, match="writing the TensorFusionWorkload"):
        await admitter(Cache(workload)).admit(request())


async def test_a_denied_pod_takes_no_index_and_a_dry_run_only_previews() -> None:
    taken: list[bool] = []
    bad = make_pod(resources_ok(**{"gpu-count": "0"}), name="web-2", namespace="team")
    denied = await admitter(Cache(), taken).admit(
        AdmissionRequest("uid-2", "CREATE", "team", "web-2", bad))  # fmt: skip
    assert not denied.allowed and taken == []
    dry = AdmissionRequest("uid-3", "CREATE", "team", "web-1", request().object, dry_run=True)
    assert (await admitter(Cache(), taken).admit(dry)).allowed
    assert taken == [True]
