"""`gather_facts`: only what the pipeline will read is fetched, the index is previewed on a dry
run, and a failing or late source is a transient error naming the step."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tensorfusion.admission.facts_gathering import (
    AdmissionSettings,
    PodIndex,
    _ReadPools,
    gather_facts,
    take_pod_index,
)
from tensorfusion.admission.webhook_app import TransientAdmissionError
from tensorfusion.domain.admission.facts import facts_needed
from tensorfusion.domain.admission.pipeline import admit
from tensorfusion.domain.admission.review import AdmissionRequest
from tensorfusion.domain.model import GPUPool

from .admission_builders import make_pod, make_pool, resources_ok


@dataclass
class Sources:
    calls: list[str] = field(default_factory=list)
    owner_error: Exception | None = None
    owner_delay: float = 0.0
    owners: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    index: PodIndex = field(default_factory=lambda: PodIndex(7))
    index_delay: float = 0.0

    def pools(self) -> Sequence[Mapping[str, Any]]:
        self.calls.append("pools")
        return [make_pool(), make_pool("other", default=False)]

    def profile(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append(f"profile {name}")
        return None

    def quota(self, namespace: str) -> Mapping[str, Any] | None:
        self.calls.append("quota")
        return None

    def gpus(self) -> Sequence[Mapping[str, Any]]:
        self.calls.append("gpus")
        return []

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        self.calls.append("namespace")
        return {}

    async def owner(
        self, namespace: str, ref: Mapping[str, Any], *, fresh: bool = True
    ) -> Mapping[str, Any] | None:
        self.calls.append(f"owner {ref['name']}")
        await asyncio.sleep(self.owner_delay)
        if self.owner_error is not None:
            raise self.owner_error
        return self.owners.get(ref["name"])

    async def pod_index(self, *, preview: bool) -> PodIndex:
        self.calls.append(f"index preview={preview}")
        await asyncio.sleep(self.index_delay)
        return self.index


def request(pod: dict[str, Any], dry_run: bool = False) -> AdmissionRequest:
    return AdmissionRequest("uid", "CREATE", "default", pod["metadata"].get("name", ""), pod,
                            dry_run=dry_run)  # fmt: skip


REPLICA_SET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "rs",
               "controller": True}  # fmt: skip


async def test_a_tf_pod_gets_its_pools_quota_and_owner_then_its_index() -> None:
    sources = Sources(owners={"web-5d8f": {"metadata": {"name": "web-5d8f", "uid": "rs"}}})
    pod = make_pod(resources_ok(), owner=REPLICA_SET)
    facts = await gather_facts(request(pod), sources, AdmissionSettings())
    assert sources.calls == ["owner web-5d8f", "pools", "quota"], "no index before the pipeline"
    assert set(facts.pools) == {"tensor-fusion-shared", "other"}
    assert facts.owners == {("apps/v1", "ReplicaSet", "web-5d8f"):
                            {"metadata": {"name": "web-5d8f", "uid": "rs"}}}  # fmt: skip
    index = await take_pod_index(sources, AdmissionSettings(), preview=False,
                                 deadline=asyncio.get_running_loop().time() + 1)  # fmt: skip
    assert index.value == 7 and sources.calls[-1] == "index preview=False"
    decision = admit(pod, replace(facts, pod_index=index.value))
    assert decision.allowed and decision.mutated_pod is not None


async def test_a_named_pool_is_the_only_pool_read() -> None:
    sources = Sources()
    pod = make_pod(resources_ok(gpupool="other"))
    facts = await gather_facts(request(pod), sources, AdmissionSettings())
    assert set(facts.pools) == {"other"}


async def test_a_pod_not_asking_for_tensor_fusion_costs_no_fetch() -> None:
    sources = Sources()
    facts = await gather_facts(request(make_pod(enabled=None)), sources, AdmissionSettings())
    assert sources.calls == [] and facts.pod_index == 0


async def test_a_late_index_is_transient_and_names_the_step() -> None:
    sources = Sources(index_delay=1.0)
    with pytest.raises(TransientAdmissionError) as raised:
        await take_pod_index(sources, AdmissionSettings(deadline_s=0.05), preview=True,
                             deadline=asyncio.get_running_loop().time() + 0.05)  # fmt: skip
    assert raised.value.operation == "taking a pod index"
    assert "admission deadline" in str(raised.value)


async def test_a_failing_owner_read_is_transient_and_names_the_step() -> None:
    sources = Sources(owner_error=RuntimeError("connection refused"))
    with pytest.raises(TransientAdmissionError) as raised:
        await gather_facts(request(make_pod(resources_ok(), owner=REPLICA_SET)), sources,
                           AdmissionSettings())  # fmt: skip
    assert str(raised.value) == "reading the pod's owners failed, retry: connection refused"


async def test_the_deadline_covers_every_call() -> None:
    sources = Sources(owner_delay=1.0)
    with pytest.raises(TransientAdmissionError) as raised:
        await gather_facts(request(make_pod(resources_ok(), owner=REPLICA_SET)), sources,
                           AdmissionSettings(deadline_s=0.05))  # fmt: skip
    assert raised.value.operation == "reading the pod's owners"
    assert "admission deadline" in str(raised.value)


def test_owners_are_read_fresh_only_for_a_count() -> None:
    plain = facts_needed(make_pod(resources_ok(), owner=REPLICA_SET))
    assert plain.owners and not plain.fresh_owners
    counted = facts_needed(make_pod(resources_ok(**{"enabled-replicas": "2"}), owner=REPLICA_SET))
    assert counted.owners and counted.fresh_owners


def test_a_pool_is_read_once_per_resource_version() -> None:
    reader = _ReadPools()
    pool = make_pool()
    pool["metadata"].update(uid="p1", resourceVersion="5")
    first = reader.read(pool)
    assert isinstance(first, GPUPool)
    assert reader.read(copy.deepcopy(pool)) is first
    pool["metadata"]["resourceVersion"] = "6"
    assert reader.read(pool) is not first
    broken = make_pool(spec={"capacityConfig": "lots"})
    broken["metadata"].update(uid="p2", resourceVersion="1")
    assert reader.read(broken) is broken, "a pool that does not read is load_facts' to report"
