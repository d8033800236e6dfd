"""The right-sizing what-if (`simulate --auto-scale`): the trace again with each workload's pods
at the request the autoscaler's `recommend` gives from their usage profile."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.autoscaling.recommendation import recommend
from tensorfusion.domain.autoscaling.settings import DEFAULTS
from tensorfusion.domain.autoscaling.usage_profile import UsagePoint, profile_percentiles
from tensorfusion.sim.cluster_file import ClusterFile
from tensorfusion.sim.engine import SimPod
from tensorfusion.sim.html_report import render_html
from tensorfusion.sim.right_sizer import RightSizer
from tensorfusion.sim.right_sizing import run_with_right_sizing
from tensorfusion.sim.runner import SimulationOptions, new_simulation, run_simulation
from tensorfusion.sim.workload_file import WorkloadFile

from .traces import HARDWARE, POOL, PREFIX

GiB = 2**30
HOUR = 3600.0


def cluster(rules: list[dict[str, Any]] | None = None) -> ClusterFile:
    """One node with one 300-TFLOPS, 80Gi GPU."""
    pool: dict[str, Any] = {"name": POOL, "isDefault": True}
    if rules is not None:
        pool["verticalScalingRules"] = rules
    return ClusterFile.model_validate({
        "hardware": HARDWARE, "pools": [pool],
        "nodes": [{"name": "n", "pool": POOL, "cpu": "16", "memory": "64Gi",
                   "gpus": {"model": "big", "count": 1}}],
    })  # fmt: skip


def entry(name: str, *, replicas: int = 4, vram: str = "40Gi", **extra: Any) -> dict[str, Any]:
    """`replicas` pods at once, each asking 10 TFLOPS and `vram`, running 2 h."""
    annotations = {PREFIX + "tflops-request": "10", PREFIX + "vram-request": vram}
    annotations.update(extra.pop("annotations", {}))
    pod = {"metadata": {"labels": {PREFIX + "enabled": "true", "app": name},
                        "annotations": annotations},
           "spec": {"containers": [{"name": "c"}]}}  # fmt: skip
    return {"name": name, "replicas": replicas, "duration": 2 * HOUR, "pod": pod, **extra}


def trace(*entries: dict[str, Any]) -> WorkloadFile:
    return WorkloadFile.model_validate({"workloads": list(entries)})


def what_if(workload: WorkloadFile, rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report of the first hour with the what-if."""
    options = SimulationOptions(alerts=False, until=HOUR)
    return run_with_right_sizing(cluster(rules), workload, Path("cluster.yaml"), options)


def plan(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in report["rightSizing"]["workloads"] if p["entry"] == name)


SMALL_USERS = entry("svc", usage={"tflops": 0.5, "vram": 0.4})
"""Four pods asking 40Gi of one 80Gi GPU, each using 40% of its VRAM and half its TFLOPS."""


def test_pods_that_use_less_than_they_ask_fit_more_once_right_sized() -> None:
    report = what_if(trace(SMALL_USERS))
    section = report["rightSizing"]
    # As given: two 40Gi pods fill the GPU, two wait the whole hour.
    assert (report["summary"]["placed"], report["summary"]["pending"]) == (2, 2)
    assert section["baseline"]["placed"] == 2 and section["baseline"]["pending"] == 2
    # Right-sized (40% x 1.15 = 46% of 40Gi = 18.4Gi): all four fit.
    assert section["rightSized"]["placed"] == 4 and section["rightSized"]["pending"] == 0
    assert section["morePodsPlaced"] == 2
    svc = plan(report, "svc")
    assert svc["changed"] and svc["pods"] == 4 and svc["settings"] == "defaults"
    new = ResourceAmount.from_json(svc["rightSized"]["requests"])
    assert new.tflops_milli == 5_750  # 0.5 x 1.15 x 10 TFLOPS
    assert abs(new.vram_bytes - 0.46 * 40 * GiB) < 1
    # Given back from the two pods the trace placed, all the hour: 2 x (40Gi - 18.4Gi).
    freed = section["freed"]["requests"]
    assert freed["peak"]["tflops"] == freed["mean"]["tflops"] == 2 * 4.25
    assert freed["peak"]["vramGiB"] == round(2 * (40 * GiB - new.vram_bytes) / GiB, 3)
    assert freed["peakPercentOfPhysical"]["tflops"] == round(100 * 8.5 / 300, 2)
    # Without a limit, virtual capacity counts the request: the same comes back there.
    assert section["freed"]["limits"]["peak"] == freed["peak"]


def test_the_recommendation_is_the_controllers_recommend_on_the_profiles_percentiles() -> None:
    tflops = [(0.0, 0.1), (1_800.0, 0.6), (6_000.0, 0.3)]
    vram = [(0.0, 0.2), (HOUR, 0.4), (6_900.0, 0.9)]
    steps = entry("steps", replicas=1, annotations={PREFIX + "tflops-limit": "20"},
                  usage={"tflops": [{"at": at, "fraction": f} for at, f in tflops],
                         "vram": [{"at": at, "fraction": f} for at, f in vram]})  # fmt: skip
    report = what_if(trace(steps))
    requests = ResourceAmount(tflops_milli=10_000, vram_bytes=40 * GiB)
    limits = ResourceAmount(tflops_milli=20_000, vram_bytes=40 * GiB)
    s = DEFAULTS
    usage = {
        name: profile_percentiles(
            [UsagePoint(at, f) for at, f in profile], duration_s=2 * HOUR, request=request,
            rows_per_sample=1,
            fractions=(getattr(s, f"lower_bound_{name}_percentile"),
                       getattr(s, f"target_{name}_percentile"),
                       getattr(s, f"upper_bound_{name}_percentile")),
        )
        for name, profile, request in (("compute", tflops, 10_000), ("vram", vram, 40 * GiB))
    }  # fmt: skip
    assert len({usage["vram"].lower, usage["vram"].target, usage["vram"].upper}) == 3
    expected = recommend(s, original=(requests, limits), current=(requests, limits),
                         compute=usage["compute"], vram=usage["vram"])  # fmt: skip
    assert expected.change
    found = plan(report, "steps")
    assert found["rightSized"]["requests"] == expected.requests.to_json()
    assert found["rightSized"]["limits"] == expected.limits.to_json()


def test_a_pod_is_placed_with_the_plans_request_and_limit_and_nothing_else_changes() -> None:
    limited = entry("svc", annotations={PREFIX + "tflops-limit": "20"},
                    usage={"tflops": 0.5, "vram": 0.4})  # fmt: skip
    workload = trace(limited, entry("bare"))
    simulation = new_simulation(cluster(), workload, Path("c"))
    sizer = RightSizer(workload, {})
    for index, name in ((0, "svc-0"), (1, "bare-0")):
        pod = SimPod(name, "default", f"uid-{name}", "", 0, 60, workload.workloads[index].pod,
                     entry_index=index)  # fmt: skip
        prepared = simulation.preparer.prepare(pod.manifest, pod.name, pod.namespace, pod.uid)
        placed = sizer(pod, prepared)
        found = sizer.plan_of(index, prepared.request)
        if index == 1:  # no usage profile: admission's request, no plan
            assert placed == prepared.request and found is None
            continue
        assert found is not None and found.changed
        assert (placed.request, placed.limit) == (found.new_requests, found.new_limits)
        assert placed.limit.tflops_milli == 2 * placed.request.tflops_milli  # the ratio kept
        assert replace(placed, request=prepared.request.request,
                       limit=prepared.request.limit) == prepared.request  # fmt: skip


def test_without_usage_profiles_auto_scale_changes_nothing() -> None:
    native = {"name": "web", "pod": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}}  # fmt: skip
    typo = entry("typo", replicas=1, annotations={PREFIX + "vram-request": "16GB"})
    workload = trace(entry("svc"), entry("other", vram="10Gi", arrival=600), native, typo)
    options = SimulationOptions(alerts=False, until=HOUR)
    plain = run_simulation(cluster(), workload, Path("cluster.yaml"), options)
    report = run_with_right_sizing(cluster(), workload, Path("cluster.yaml"), options)
    section = report.pop("rightSizing")
    for summary in (plain["summary"], report["summary"]):
        summary.pop("decisionsPerSecond")  # wall-clock
    assert report == plain
    assert (plain["summary"]["placed"], plain["summary"]["pending"]) == (3, 6)
    assert plain["summary"]["rejected"] == 1
    assert section["workloads"] == []
    assert section["rightSized"] == section["baseline"]
    assert section["morePodsPlaced"] == 0
    zero = {"tflops": 0.0, "vramGiB": 0.0}
    for kind in ("requests", "limits"):
        assert section["freed"][kind]["peak"] == section["freed"][kind]["mean"] == zero


def test_the_workloads_own_config_and_its_pools_rule_set_the_settings() -> None:
    rule = {"name": "lean", "selector": {"matchLabels": {"app": "ruled"}},
            "autoScaling": {"autoSetResources": {"marginFraction": "0.5"}}}  # fmt: skip
    own = {"autoSetResources": {"targetResource": "vram"}}
    catch_all = {"name": "all", "autoScaling": {"autoSetResources": {"marginFraction": "0"}}}
    report = what_if(trace(
        entry("ruled", replicas=1, usage={"tflops": 0.5, "vram": 0.4}),
        entry("own", replicas=1, usage={"tflops": 0.5, "vram": 0.4}, autoScalingConfig=own),
    ), rules=[rule, catch_all])  # fmt: skip
    ruled = plan(report, "ruled")
    assert ruled["settings"] == "rule lean"
    assert ResourceAmount.from_json(ruled["rightSized"]["requests"]).tflops_milli == 7_500
    own_plan = plan(report, "own")
    assert own_plan["settings"] == "workload over rule all"
    assert own_plan["rightSized"]["requests"]["tflops"] == "10"  # VRAM only
    assert "not targeted (targetResource vram)" in own_plan["reason"]
    assert ResourceAmount.from_json(own_plan["rightSized"]["requests"]).vram_bytes == 16 * GiB


def test_enable_false_in_the_config_keeps_the_request() -> None:
    off = {"autoSetResources": {"enable": False}}
    report = what_if(trace(entry("svc", usage={"vram": 0.4}, autoScalingConfig=off)))
    svc = plan(report, "svc")
    assert not svc["changed"] and "enable is false" in svc["reason"]
    assert report["rightSizing"]["morePodsPlaced"] == 0


def test_compute_asked_as_a_percent_is_left_and_vram_right_sized() -> None:
    notebook = entry("nb", replicas=1, usage={"tflops": 0.2, "vram": 0.4},
                     annotations={PREFIX + "compute-percent-request": "20"})  # fmt: skip
    del notebook["pod"]["metadata"]["annotations"][PREFIX + "tflops-request"]
    nb = plan(what_if(trace(notebook)), "nb")
    assert nb["changed"] and nb["rightSized"]["requests"]["compute"] == "20"
    assert "compute asked as a percent" in nb["reason"]
    assert ResourceAmount.from_json(nb["rightSized"]["requests"]).vram_bytes < 40 * GiB


def test_the_30_samples_floor_counts_the_rows_of_the_whole_workload() -> None:
    # 100 s runs: 10 samples a pod. Three pods of one StatefulSet are one workload of 30 rows;
    # three bare pods are each a workload of their own (admission's identity), 10 rows each.
    shared = entry("shared", replicas=3, duration=100, usage={"vram": 0.4})
    shared["pod"]["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "shared", "uid": "u",
         "controller": True}]  # fmt: skip
    alone = entry("alone", replicas=3, duration=100, usage={"vram": 0.4})
    report = what_if(trace(shared, alone))
    assert plan(report, "shared")["changed"]
    assert not plan(report, "alone")["changed"]
    assert "10 samples, fewer than 30" in plan(report, "alone")["reason"]


def test_a_profile_peak_above_the_new_limit_is_a_warning() -> None:
    spiky = entry("spiky", replicas=1, usage={"vram": [{"at": 0, "fraction": 0.9},
                                                      {"at": 60, "fraction": 0.3}]})  # fmt: skip
    found = plan(what_if(trace(spiky)), "spiky")
    assert found["changed"]
    assert found["warnings"] == [
        "vram: the highest use, 36Gi, is above the right-sized limit 13.8Gi"
    ]


def test_the_cli_prints_and_writes_the_what_if(tmp_path: Path) -> None:
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump({"workloads": [SMALL_USERS]}), encoding="utf-8")
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(
        yaml.safe_dump(cluster().model_dump(by_alias=True, mode="json", exclude_none=True)),
        encoding="utf-8",
    )
    out, page = tmp_path / "report.json", tmp_path / "report.html"
    result = CliRunner().invoke(app, [
        "simulate", str(cluster_file), str(workload), "--auto-scale", "--until", "1h",
        "--no-alerts", "--output", str(out), "--html", str(page),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Right-sizing what-if" in result.stdout
    assert "40Gi -> 18.4Gi" in result.stdout
    assert "Right-sized, 4 pods are placed instead of 2 (+2)" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["rightSizing"]["morePodsPlaced"] == 2
    html = page.read_text(encoding="utf-8")
    assert "<h2>Right-sizing what-if</h2>" in html and "40Gi -&gt; 18.4Gi" in html
    assert html == render_html(report)


def test_progress_counts_both_runs() -> None:
    seen: list[tuple[int, int]] = []
    options = SimulationOptions(alerts=False, until=HOUR)
    run_with_right_sizing(cluster(), trace(SMALL_USERS), Path("c"), options,
                          lambda done, total: seen.append((done, total)))  # fmt: skip
    assert seen[0] == (1, 8) and seen[-1] == (8, 8)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
