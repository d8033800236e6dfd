"""The pod-index counter behind `assign-index` and the admission dry run (`PodPreparer`)."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.admission import PodIndexCounter, PodPreparer, PreparationError
from tensorfusion.domain.annotations import pod_index_from_containers
from tensorfusion.domain.model import GPUPool, GPUResourceQuota, load_as

from .admission_builders import DEFAULT_POOL, P, make_pod, make_pool, make_quota, resources_ok

# --- the counter ----------------------------------------------------------------------------


def test_counter_starts_at_1_and_counts_up() -> None:
    counter = PodIndexCounter()
    assert [counter.take() for _ in range(3)] == [1, 2, 3]


def test_counter_wraps_from_128_to_1() -> None:
    counter = PodIndexCounter()
    taken = [counter.take() for _ in range(130)]
    assert taken[:128] == list(range(1, 129))
    assert taken[127:] == [128, 1, 2]


def test_peek_does_not_advance() -> None:
    counter = PodIndexCounter()
    counter.take()
    assert counter.peek() == counter.peek() == 2
    assert counter.take() == 2
    assert counter.peek() == 3


@pytest.mark.parametrize(("last", "following"), [(1, 2), (77, 78), (127, 128), (128, 1)])
def test_restore_continues_after_the_given_value(last: int, following: int) -> None:
    counter = PodIndexCounter()
    counter.restore(last)
    assert counter.peek() == following
    assert counter.take() == following
    assert PodIndexCounter(after=last).take() == following


@pytest.mark.parametrize("last", [0, 129, -1, True, "5"])
def test_restore_rejects_values_outside_1_to_128(last: Any) -> None:
    with pytest.raises(
        ValueError, match=r"pod index counter: invalid value .*: must be an integer"
    ):
        PodIndexCounter().restore(last)


# --- the dry run ----------------------------------------------------------------------------


def preparer(**quotas: dict[str, Any]) -> PodPreparer:
    return PodPreparer(
        pools={DEFAULT_POOL: load_as(GPUPool, make_pool())},
        quotas={ns: load_as(GPUResourceQuota, quota) for ns, quota in quotas.items()},
    )


def test_simulator_admissions_take_consecutive_indices() -> None:
    prep = preparer()
    indices = [
        prep.prepare(make_pod(resources_ok()), f"p{i}", "default", f"uid-{i}").request.pod_index
        for i in range(3)
    ]
    assert indices == [1, 2, 3]
    assert prep.index.peek() == 4


def test_dry_run_previews_the_index_without_advancing_it() -> None:
    prep = preparer()
    prep.index.restore(41)
    for i in range(2):
        prepared = prep.prepare(
            make_pod(resources_ok()), f"p{i}", "default", f"uid-{i}", advance_index=False
        )
        assert prepared.request.pod_index == 42
        assert pod_index_from_containers(prepared.pod) == 42
    assert prep.index.peek() == 42


def test_the_index_wraps_across_admissions() -> None:
    prep = preparer()
    prep.index.restore(127)
    pods = [prep.prepare(make_pod(resources_ok()), f"p{i}", "default", f"u{i}") for i in range(2)]
    assert [pod.request.pod_index for pod in pods] == [128, 1]


def test_workers_and_unmutated_pods_take_no_index() -> None:
    prep = preparer()
    worker = prep.prepare(make_pod(resources_ok()), "w", "default", "uid-w")
    assert worker.mutated and worker.request.pod_index == 1
    again = prep.prepare(worker.pod, "w", "default", "uid-w")
    assert not again.mutated and again.request == worker.request
    with pytest.raises(PreparationError, match="gpupool"):
        prep.prepare(make_pod(resources_ok()), "raw", "default", "uid-r", mutate=False)
    assert prep.index.peek() == 2


def test_denials_and_non_workers_raise_the_admission_message() -> None:
    prep = preparer(default=make_quota({"maxGPUCount": 1}))
    with pytest.raises(PreparationError) as denied:
        prep.prepare(make_pod(resources_ok(**{"gpu-count": "2"})), "p", "default", "uid")
    assert str(denied.value) == (
        f'{P}gpu-count: invalid value "2": exceeds the namespace quota '
        '(GPUResourceQuota "q" spec.single.maxGPUCount = 1)'
    )
    with pytest.raises(PreparationError, match="is not a GPU worker"):
        prep.prepare(make_pod(resources_ok(), enabled=None), "p", "default", "uid")


def test_the_quota_of_the_pod_namespace_applies() -> None:
    prep = preparer(team=make_quota({"maxGPUCount": 1}))
    pod = make_pod(resources_ok(**{"gpu-count": "2"}))
    assert prep.prepare(pod, "p", "default", "uid").request.count == 2
    with pytest.raises(PreparationError, match="maxGPUCount"):
        prep.prepare(pod, "p", "team", "uid")
