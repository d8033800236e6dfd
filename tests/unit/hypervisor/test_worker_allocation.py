"""The kubelet's Allocate of an index resource: the worker pod with that index on the node gets
its `gpu-ids` as NVIDIA_VISIBLE_DEVICES, in the devices' native case."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tensorfusion.domain.annotations import KEYS, encode_index
from tensorfusion.domain.devices.worker_allocation import (
    WorkerAllocationError,
    allocate_worker,
)

NATIVE = {"gpu-aa": "GPU-AA", "gpu-bb": "GPU-BB"}


def worker(name: str, index: int, gpus: str, phase: str = "Pending", **meta: Any) -> dict[str, Any]:
    resource, value = encode_index(index)
    return {"metadata": {"name": name, "namespace": "ml", "annotations": {KEYS.gpu_ids: gpus},
                         **meta},
            "spec": {"containers": [
                {"name": "c", "resources": {"limits": {resource: str(value)}}}]},
            "status": {"phase": phase}}  # fmt: skip


def test_the_pod_with_the_index_gets_its_gpus() -> None:
    resource, value = encode_index(13)
    pods = [worker("a", 12, "gpu-aa"), worker("b", 13, "gpu-aa,gpu-bb")]
    found = allocate_worker(resource, value, pods, NATIVE)
    assert (found.pod, found.gpus) == ("b", ("gpu-aa", "gpu-bb"))
    assert found.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-AA,GPU-BB"}


def test_a_pending_holder_wins_over_a_running_one_and_ended_pods_do_not_count() -> None:
    resource, value = encode_index(5)
    pods = [worker("old", 5, "gpu-aa", phase="Running"), worker("new", 5, "gpu-bb"),
            worker("done", 5, "gpu-aa", phase="Succeeded")]  # fmt: skip
    assert allocate_worker(resource, value, pods, NATIVE).pod == "new"


@pytest.mark.parametrize(("pods", "message"), [
    ([], "no worker pod with index 5 on this node"),
    ([worker("a", 5, "gpu-aa", deletionTimestamp="x")], "no worker pod with index 5"),
    ([worker("a", 5, "")], "worker pod ml/a (index 5) has no tensor-fusion.ai/gpu-ids"),
    ([worker("a", 5, "gpu-zz")], "worker pod ml/a names GPUs this node does not have: gpu-zz"),
])  # fmt: skip
def test_what_cannot_be_allocated_says_why(pods: list[dict[str, Any]], message: str) -> None:
    resource, value = encode_index(5)
    with pytest.raises(WorkerAllocationError, match=re.escape(message)):
        allocate_worker(resource, value, pods, NATIVE)


def test_a_count_outside_the_encoding_is_refused() -> None:
    with pytest.raises(WorkerAllocationError, match="must be an integer between 1 and 8"):
        allocate_worker("tensor-fusion.ai/index_0", 9, [], NATIVE)
