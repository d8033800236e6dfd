"""The GPU status fields the allocator writes back, and the quota status the sync writes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tensorfusion.domain.allocator.allocator import Allocator
from tensorfusion.domain.allocator.mapping import quota_spec
from tensorfusion.domain.allocator.quota import NamespaceQuota, QuotaAmounts
from tensorfusion.domain.allocator.quota_status import read_quota
from tensorfusion.domain.desired_state.gpus import gpu_owned_status
from tensorfusion.domain.desired_state.objects import Exactly, merge_patch
from tensorfusion.domain.desired_state.quotas import desired_quota_status, quota_roles
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

from ..allocator.builders import gpu, request, tflops, vram

NOW = "2027-01-15T08:00:00Z"
LATER = "2027-01-15T08:00:10Z"


def test_owned_gpu_fields_follow_the_allocations() -> None:
    allocator = Allocator(isolation_policy=IsolationPolicy.DYNAMIC)
    allocator.upsert_gpu(gpu("g1", "n1"))
    for uid, namespace in (("b", "ml"), ("a", "ml"), ("c", "dev")):
        asked = replace(request(uid, ("100", "10Gi"), namespace=namespace), workload="w")
        allocator.assume(asked, "n1", ["g1"], 0.0)
        allocator.commit(uid, 0.0)
    status = gpu_owned_status(allocator.gpus["g1"], allocator.records, None, NOW)
    assert status["available"] == {"tflops": "12", "vram": "50Gi"}
    apps = status["runningApps"]
    assert [(a["namespace"], a["name"], a["count"]) for a in apps] == [("dev", "w", 1),
                                                                       ("ml", "w", 2)]  # fmt: skip
    assert [p["uid"] for p in apps[1]["pods"]] == ["a", "b"]
    assert apps[1]["pods"][0]["requests"] == {"tflops": "100", "vram": "10Gi"}
    assert status["activeIsolationMode"] == "soft"
    assert status["dynamicIsolationConflict"] is None
    assert status["allocatedPartitions"] == Exactly({})
    for uid in ("a", "b", "c"):
        allocator.release(uid)
    idle = gpu_owned_status(allocator.gpus["g1"], allocator.records, None, NOW)
    assert idle["available"] == {"tflops": "312", "vram": "80Gi"}
    assert idle["runningApps"] is None and idle["activeIsolationMode"] is None
    # Written over the busy status, the idle one deletes the apps and the lock.
    assert merge_patch(status | {"allocatedPartitions": {}}, idle) == {
        "available": {"tflops": "312", "vram": "80Gi"},
        "runningApps": None,
        "activeIsolationMode": None,
    }


def test_partitions_keep_the_time_they_were_first_written() -> None:
    allocator = Allocator()
    allocator.upsert_gpu(gpu("g1", "n1"))
    partitioned = request("p1", ("0", "0"), isolation=IsolationMode.PARTITIONED,
                          partition_template_id="1g.10gb", namespace="ml")  # fmt: skip
    allocator.assume(partitioned, "n1", ["g1"], 0.0)
    allocator.commit("p1", 0.0)
    first = gpu_owned_status(allocator.gpus["g1"], allocator.records, None, NOW)
    entry = first["allocatedPartitions"].value["p1"]
    assert entry == {"templateId": "1g.10gb", "podUid": "p1", "podName": "p1",
                     "namespace": "ml", "allocatedAt": NOW}  # fmt: skip
    written = {"status": {"allocatedPartitions": {"p1": entry}}}
    again = gpu_owned_status(allocator.gpus["g1"], allocator.records, written, LATER)
    assert again["allocatedPartitions"].value["p1"]["allocatedAt"] == NOW
    unchanged = {"allocatedPartitions": again["allocatedPartitions"]}
    assert merge_patch(written["status"], unchanged) == {}


def quota(name: str, created: str, threshold: int = 50, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUResourceQuota",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
        "spec": {"total": {"requests": {"tflops": "1000"}, "alertThresholdPercent": threshold}},
        "status": status,
    }


def enforced(obj: dict[str, Any], used_tflops: str) -> dict[str, NamespaceQuota]:
    reading = read_quota(obj)
    assert reading.quota is not None
    namespace_quota = NamespaceQuota(quota_spec(reading.quota))
    namespace_quota.committed.add(QuotaAmounts(tflops(used_tflops), vram("1Gi"), 0, 0, 1))
    return {"ml": namespace_quota}


def test_quota_status_is_written_when_it_changes_and_alerts_once() -> None:
    q = quota("q", "2027-01-01T00:00:00Z")
    roles = quota_roles([q])
    first = desired_quota_status(q, roles[("ml", "q")], enforced(q, "100"), NOW)
    assert first.status is not None and first.alert is None
    assert first.status["availablePercent"]["requests.tflops"] == "90.00"
    q["status"] = first.status
    # Only the time would change: nothing to write.
    assert desired_quota_status(q, roles[("ml", "q")], enforced(q, "100"), LATER).status is None
    high = desired_quota_status(q, roles[("ml", "q")], enforced(q, "600"), LATER)
    assert high.status is not None and high.alert is not None
    assert "requests.tflops 40.00%" in (high.alert.message or "")
    q["status"] = high.status
    higher = desired_quota_status(q, roles[("ml", "q")], enforced(q, "700"), LATER)
    assert higher.status is not None and higher.alert is None  # still reached: no new alert


def test_a_younger_quota_is_superseded_and_reports_no_usage() -> None:
    old, young = quota("old", "2027-01-01T00:00:00Z"), quota("young", "2027-01-02T00:00:00Z")
    roles = quota_roles([young, old])
    assert roles[("ml", "young")].superseded_by == "old"
    update = desired_quota_status(young, roles[("ml", "young")], enforced(old, "600"), NOW)
    assert update.status is not None and update.alert is None
    ready = update.status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "Superseded")
    assert update.status["used"] == {"requests": {}, "limits": {}, "workers": 0}
