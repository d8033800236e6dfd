"""`tensor-fusion simulate` and `tensor-fusion simulate-schedule`, run in-process."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from tensorfusion.cli.main import app
from tensorfusion.domain.scheduling.decision import Decision, decide_indexed
from tensorfusion.sim import engine

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
CLUSTER = EXAMPLES / "cluster.yaml"
WORKLOAD = EXAMPLES / "workload.yaml"
GUIDE_POD = Path(__file__).parent / "data" / "guide_test_pod.yaml"
POOL = "tensor-fusion-shared"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def assert_input_error(result: Result, *fragments: str) -> str:
    """Exit 2, one `error:` line on stderr naming every fragment, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def cluster_with(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    change(data)
    return write_yaml(tmp_path / "cluster.yaml", data)


def report_of(tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    result = invoke(
        "simulate", str(CLUSTER), str(WORKLOAD), "--output", str(out), "--quiet", "--no-alerts",
        *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


# ---- simulate: the example run ---------------------------------------------------------------


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, dict[str, Any], str]:
    folder = tmp_path_factory.mktemp("simulate")
    out, html = folder / "report.json", folder / "report.html"
    result = invoke(
        "simulate", str(CLUSTER), str(WORKLOAD), "--output", str(out), "--html", str(html)
    )
    report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    page = html.read_text(encoding="utf-8") if html.exists() else ""
    return result, report, page


def test_example_simulation_exits_0_and_writes_both_reports(
    example_run: tuple[Result, dict[str, Any], str],
) -> None:
    result, report, page = example_run
    assert result.exit_code == 0, result.output
    assert report
    assert "<svg" in page


def test_example_report_places_pods_and_rejects_the_two_typos(
    example_run: tuple[Result, dict[str, Any], str],
) -> None:
    _, report, _ = example_run
    summary = report["summary"]
    assert summary["placed"] > 0
    assert summary["rejected"] == 2
    assert len(report["rejected"]) == 1
    rejected = report["rejected"][0]
    assert rejected["pods"] == 2
    assert "tensor-fusion.ai/vram-request" in rejected["reason"]
    assert '"16GB"' in rejected["reason"]


def test_example_report_has_pools_alerts_and_timeline(
    example_run: tuple[Result, dict[str, Any], str],
) -> None:
    _, report, _ = example_run
    (pool,) = report["pools"]
    assert pool["name"] == POOL
    assert pool["physical"] == {"tflops": "10784", "vram": "2048Gi"}  # 16×312 + 16×362
    assert pool["virtual"]["tflops"] == "53920"  # ×5
    assert set(pool["virtual"]) == {"tflops", "vram"}
    assert isinstance(report["alerts"], list)
    assert report["alerts"]  # the example trace leaves GPUs idle and fills nodes
    for alert in report["alerts"]:
        assert {"alertname", "state", "at", "severity", "instance", "summary"} <= set(alert)
    timeline = report["timeline"]
    assert isinstance(timeline, list)
    assert timeline
    assert [s["t"] for s in timeline] == sorted(s["t"] for s in timeline)


# ---- simulate: what-if flags -----------------------------------------------------------------


def test_placement_mode_flag_changes_the_policy(tmp_path: Path) -> None:
    report = report_of(tmp_path, "--placement-mode", "LowLoadFirst")
    assert report["policy"]["pools"][POOL]["placementMode"] == "LowLoadFirst"
    assert report["pools"][0]["placementMode"] == "LowLoadFirst"


def test_oversell_ratio_flag_changes_the_policy_and_virtual_capacity(tmp_path: Path) -> None:
    report = report_of(tmp_path, "--tflops-oversell-ratio", "1000")
    assert report["policy"]["pools"][POOL]["oversubscription"].startswith("tflops x10,")
    pool = report["pools"][0]
    assert pool["oversubscription"]["tflopsOversellRatio"] == 1000
    assert pool["virtual"]["tflops"] == "107840"


def test_no_oversubscription_flag_makes_virtual_equal_physical(tmp_path: Path) -> None:
    report = report_of(tmp_path, "--no-oversubscription")
    assert report["policy"]["pools"][POOL]["oversubscription"] is None
    pool = report["pools"][0]
    assert pool["oversubscription"] is None
    assert pool["virtual"] == pool["physical"]


def test_default_policy_is_the_cluster_files(tmp_path: Path) -> None:
    report = report_of(tmp_path)
    assert report["policy"]["pools"][POOL]["placementMode"] == "NodeCompactGPULowLoad"
    assert report["pools"][0]["oversubscription"] == {
        "tflopsOversellRatio": 500, "vramExpandToHostMem": 50, "vramExpandToHostDisk": 70,
    }  # fmt: skip


# ---- simulate: bad input ---------------------------------------------------------------------


def test_malformed_yaml_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("nodes: [\n  - a\n", encoding="utf-8")
    assert_input_error(invoke("simulate", str(bad), str(WORKLOAD)), str(bad), "not valid YAML")


def test_unknown_placement_mode_in_the_cluster_file_exits_2(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["pools"][0]["placementMode"] = "Fastest"

    path = cluster_with(tmp_path, change)
    assert_input_error(
        invoke("simulate", str(path), str(WORKLOAD)), str(path), "placementMode", "'Fastest'"
    )


def test_unknown_placement_mode_flag_exits_2() -> None:
    line = assert_input_error(
        invoke("simulate", str(CLUSTER), str(WORKLOAD), "--placement-mode", "Fastest"),
        "--placement-mode", "'Fastest'",
    )  # fmt: skip
    assert "NodeCompactGPULowLoad" in line


def test_bad_quantity_in_the_cluster_file_exits_2(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["nodes"][0]["memory"] = "1TB"

    path = cluster_with(tmp_path, change)
    line = assert_input_error(invoke("simulate", str(path), str(WORKLOAD)), str(path), "'1TB'")
    assert re.search(r"nodes(\.0|\[0\])\.memory", line), line


def _unknown_pool(tmp_path: Path) -> Path:
    def change(data: dict[str, Any]) -> None:
        data["nodes"][0]["pool"] = "nope"

    return cluster_with(tmp_path, change)


def test_node_referencing_an_unknown_pool_exits_2(tmp_path: Path) -> None:
    path = _unknown_pool(tmp_path)
    line = assert_input_error(
        invoke("simulate", str(path), str(WORKLOAD)), str(path), "pool", "'nope'",
        "no such pool",
    )  # fmt: skip
    assert ": :" not in line  # a model-level error still names its field


def test_workload_entry_with_a_bad_duration_exits_2(tmp_path: Path) -> None:
    data = yaml.safe_load(WORKLOAD.read_text(encoding="utf-8"))
    data["workloads"][0]["duration"] = "20 minutes"
    path = write_yaml(tmp_path / "workload.yaml", data)
    assert_input_error(
        invoke("simulate", str(CLUSTER), str(path)), str(path), "duration", "'20 minutes'"
    )


def test_missing_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    assert_input_error(invoke("simulate", str(missing), str(WORKLOAD)), str(missing))


# ---- simulate-schedule -----------------------------------------------------------------------


def schedule(pod: Path, *flags: str) -> Result:
    return invoke("simulate-schedule", str(pod), "--cluster", str(CLUSTER), *flags)


def test_guide_test_pod_is_mutated_and_scheduled() -> None:
    result = schedule(GUIDE_POD)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["mutated"] is True
    assert body["pod"] == {"namespace": "default", "name": "test-pod"}
    assert body["request"]["pool"] == POOL
    assert body["request"]["qos"] == "high"
    assert body["request"]["requests"] == {"tflops": "100", "vram": "16Gi"}
    assert body["result"]["schedulable"] is True
    assert body["result"]["node"] in {n["node"] for n in body["nodes"]}
    assert len(body["result"]["gpus"]) == 1
    assert [n["node"] for n in body["nodes"]] == sorted(n["node"] for n in body["nodes"])
    assert sum(1 for n in body["nodes"] if n["selected"]) == 1


def test_nodes_flag_restricts_the_candidates() -> None:
    result = schedule(GUIDE_POD, "--nodes", "l40s-1")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [n["node"] for n in body["nodes"]] == ["l40s-1"]
    assert body["result"]["node"] == "l40s-1"


def test_unknown_node_in_nodes_flag_exits_2() -> None:
    assert_input_error(schedule(GUIDE_POD, "--nodes", "a100-0,zzz"), "--nodes", "zzz")


def test_pod_that_fits_nowhere_exits_1_with_reasons_per_node(tmp_path: Path) -> None:
    pod = write_yaml(tmp_path / "big.yaml", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "big", "labels": {"tensor-fusion.ai/enabled": "true"},
            "annotations": {
                "tensor-fusion.ai/gpu-count": "8", "tensor-fusion.ai/tflops-request": "10",
                "tensor-fusion.ai/vram-request": "79Gi",
                "tensor-fusion.ai/gpu-model": "NVIDIA L40S",
            },
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })  # fmt: skip
    result = schedule(pod)
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["result"]["schedulable"] is False
    assert body["result"]["node"] is None
    assert body["result"]["message"] == (
        "0/4 nodes are available: 2 GPUModelFilter, 2 GPUResourceFilter."
    )
    by_node = {n["node"]: n for n in body["nodes"]}
    for name in ("a100-0", "a100-1"):
        assert by_node[name]["rejectedAt"] == "GPUModelFilter"
        assert by_node[name]["message"] == "0 of 8 required GPUs left after GPUModelFilter"
    for name in ("l40s-0", "l40s-1"):
        assert by_node[name]["rejectedAt"] == "GPUResourceFilter"
        assert by_node[name]["message"] == "0 of 8 required GPUs left after GPUResourceFilter"
        reasons = {g["reason"] for g in by_node[name]["gpus"]}
        assert reasons == {"available vram 48Gi < request 79Gi"}
    for node in body["nodes"]:
        assert node["selected"] is False
        assert node["score"] is None


def test_invalid_annotation_exits_2_with_the_admission_message(tmp_path: Path) -> None:
    pod = yaml.safe_load(GUIDE_POD.read_text(encoding="utf-8"))
    pod["metadata"]["annotations"]["tensor-fusion.ai/vram-request"] = "16GB"
    result = schedule(write_yaml(tmp_path / "pod.yaml", pod))
    assert_input_error(result, "tensor-fusion.ai/vram-request", '"16GB"')
    assert result.stdout == ""


def test_pod_that_is_not_a_gpu_worker_exits_2(tmp_path: Path) -> None:
    pod = yaml.safe_load(GUIDE_POD.read_text(encoding="utf-8"))
    pod["metadata"]["labels"] = {}
    assert_input_error(schedule(write_yaml(tmp_path / "pod.yaml", pod)), "not a GPU worker")


def test_malformed_pod_yaml_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "pod.yaml"
    bad.write_text("metadata: {name: [\n", encoding="utf-8")
    assert_input_error(schedule(bad), str(bad), "not valid YAML")


def _bad_quota(tmp_path: Path, key: str, value: str) -> Path:
    def change(data: dict[str, Any]) -> None:
        if key == "maxWorkers":
            data["quotas"][0]["total"]["maxWorkers"] = value
        else:
            data["quotas"][0]["total"]["requests"]["tflops"] = value

    return cluster_with(tmp_path, change)


def test_bad_quantity_in_a_cluster_file_quota_exits_2(tmp_path: Path) -> None:
    path = _bad_quota(tmp_path, "tflops", "lots")
    assert_input_error(invoke("simulate", str(path), str(WORKLOAD)), str(path), "'lots'")


def test_bad_max_workers_in_a_cluster_file_quota_exits_2(tmp_path: Path) -> None:
    path = _bad_quota(tmp_path, "maxWorkers", "many")
    assert_input_error(invoke("simulate", str(path), str(WORKLOAD)), str(path), "'many'")


def test_simulate_schedule_with_a_bad_quota_quantity_exits_2(tmp_path: Path) -> None:
    path = _bad_quota(tmp_path, "tflops", "lots")
    result = invoke("simulate-schedule", str(GUIDE_POD), "--cluster", str(path))
    assert_input_error(result, str(path), "'lots'")


def test_quota_the_model_rejects_exits_2_naming_the_field(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["quotas"][0]["single"]["maxRequests"] = {"compute": "150"}

    path = cluster_with(tmp_path, change)
    field = "quotas[0].single.maxRequests.compute"
    for result in (
        invoke("simulate", str(path), str(WORKLOAD)),
        invoke("simulate-schedule", str(GUIDE_POD), "--cluster", str(path)),
    ):
        assert_input_error(result, str(path), field, "'150'", "must be between 0 and 100")


def test_bad_container_quantity_in_a_workload_pod_exits_2(tmp_path: Path) -> None:
    data = yaml.safe_load(WORKLOAD.read_text(encoding="utf-8"))
    data["workloads"][0]["pod"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2 cores"}
    }
    path = write_yaml(tmp_path / "workload.yaml", data)
    assert_input_error(invoke("simulate", str(CLUSTER), str(path)), "requests.cpu", "'2 cores'")


def test_bad_container_quantity_in_a_workload_pod_names_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(WORKLOAD.read_text(encoding="utf-8"))
    data["workloads"][0]["pod"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2 cores"}
    }
    path = write_yaml(tmp_path / "workload.yaml", data)
    assert_input_error(invoke("simulate", str(CLUSTER), str(path)), str(path))


def test_an_unknown_oversubscription_key_exits_2_naming_it(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["pools"][0]["capacityConfig"]["oversubscription"]["tflopsOversellRatoi"] = 900

    path = cluster_with(tmp_path, change)
    result = invoke("simulate", str(path), str(WORKLOAD))
    assert_input_error(
        result,
        str(path),
        "pools[0] (tensor-fusion-shared).capacityConfig.oversubscription.tflopsOversellRatoi",
        "unknown field",
    )


def test_quota_limits_below_requests_exit_2_naming_both_fields(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["quotas"][0]["total"]["limits"] = {"tflops": "1000"}

    path = cluster_with(tmp_path, change)
    result = invoke("simulate-schedule", str(GUIDE_POD), "--cluster", str(path))
    assert_input_error(
        result,
        "quotas[0] (research).total.limits.tflops: invalid value 1k",
        "must not be below spec.total.requests.tflops (2k)",
    )


def test_a_node_name_with_a_trailing_newline_exits_2(tmp_path: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        data["nodes"][0]["name"] = "a100\n"

    path = cluster_with(tmp_path, change)
    result = invoke("simulate", str(path), str(WORKLOAD))
    assert_input_error(result, str(path), "nodes[0].name", "must be a DNS subdomain")


def test_verify_fast_path_shadows_every_decision(tmp_path: Path) -> None:
    report = report_of(tmp_path, "--verify-fast-path")
    check = report["fastPathVerification"]
    assert check["decisions"] == report["summary"]["decisions"] > 0
    assert (check["mismatches"], check["examples"]) == (0, [])
    assert "fastPathVerification" not in report_of(tmp_path)


def test_a_fast_path_disagreement_exits_1_naming_the_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = decide_indexed

    def broken(*args: Any, **kwargs: Any) -> Decision:
        decision = real(*args, **kwargs)
        return replace(decision, combined=decision.combined + 1)

    monkeypatch.setattr(engine, "decide_indexed", broken)
    result = invoke(
        "simulate", str(CLUSTER), str(WORKLOAD), "--verify-fast-path", "--quiet", "--no-alerts"
    )
    assert result.exit_code == 1, result.output
    assert "fast path verification FAILED" in result.stderr
    assert "fast chose" in result.stderr and "full chose" in result.stderr
