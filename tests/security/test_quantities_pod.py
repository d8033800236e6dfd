"""A bad quantity in a pod's annotations or a WorkloadProfile: a permanent 400 naming the bound
(never the webhook's 503 "retry"), and the extender's filter fails every node with it."""

from __future__ import annotations

import pytest

from tensorfusion.domain.admission import admit
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.model import ModelError, WorkloadProfile, load_as
from tensorfusion.domain.scheduling.extender_verbs import filter_worker
from tensorfusion.domain.scheduling.node_index import NodeScoreIndex

from ..unit.admission.admission_builders import make_facts, make_pod, resources_ok
from ..unit.allocator.builders import AllNodesPass
from ..unit.scheduling.test_extender_verbs import ARGS, NODES, cluster, worker

BOUND = "must be at most 9223372036854775807 in magnitude"


@pytest.mark.parametrize("value", ["1e400", "9" * 10_000])
def test_the_webhook_denies_a_pod_with_a_huge_quantity(value: str) -> None:
    decision = admit(make_pod(resources_ok(**{"tflops-request": value})), make_facts())
    assert not decision.allowed
    assert decision.code == 400 and decision.reason == "BadRequest"
    assert decision.message.startswith(f"{KEYS.tflops_request}: invalid value ")


def test_the_denial_names_the_bound() -> None:
    decision = admit(make_pod(resources_ok(**{"vram-request": "1e400"})), make_facts())
    assert (
        decision.message == f'{KEYS.vram_request}: invalid value "1e400": {BOUND} (max '
        "int64, Kubernetes' largest quantity)"
    )


def test_the_extender_fails_every_node_with_the_problem() -> None:
    pod = worker()
    pod["metadata"]["annotations"][KEYS.tflops_request] = "1e400"
    answer = filter_worker(
        NodeScoreIndex(cluster()), pod, node_names=NODES, native=AllNodesPass(), profile=ARGS, now=1
    )
    assert answer.result.node_names == () and answer.assumed is None
    reasons = set(answer.result.failed_and_unresolvable_nodes.values())
    assert len(reasons) == 1 and BOUND in reasons.pop()


def test_a_workload_profile_with_a_huge_quantity_is_a_model_error_naming_the_field() -> None:
    raw = {"apiVersion": "tensor-fusion.ai/v1", "kind": "WorkloadProfile",
           "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"resources": {"limits": {"vram": "1e400"}}}}  # fmt: skip
    with pytest.raises(ModelError) as caught:
        load_as(WorkloadProfile, raw)
    assert "spec.resources.limits.vram" in str(caught.value) and BOUND in str(caught.value)
