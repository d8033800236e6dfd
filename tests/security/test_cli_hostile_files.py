"""Hostile files given to `tensor-fusion simulate` and `simulate-schedule`: exit 2, one line
naming the file and the limit, no traceback, nothing built past the check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from tensorfusion.cli.main import app
from tensorfusion.sim.cluster_file import NodeSpec
from tensorfusion.sim.workload_file import TraceEntry

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
WORKLOAD = ROOT / "examples" / "workload.yaml"
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x01"
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "annotations": {}},
    "spec": {"containers": [{"name": "c"}]},
}


def invoke(*args: str, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def refused(result: Result, *fragments: str) -> str:
    """Exit 2 and one `error:` line holding every fragment, without a traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def pod_file(tmp_path: Path, annotations: dict[str, str]) -> Path:
    path = tmp_path / "pod.yaml"
    manifest = {**POD, "metadata": {"name": "p", "annotations": annotations}}
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def schedule(pod: Path | str, cluster: Path = CLUSTER) -> Result:
    return invoke("simulate-schedule", str(pod), "--cluster", str(cluster))


@pytest.mark.parametrize("role", ["pod", "cluster"])
def test_a_binary_file_is_refused_naming_it(tmp_path: Path, role: str) -> None:
    binary = tmp_path / "image.png"
    binary.write_bytes(BINARY)
    args = (binary, CLUSTER) if role == "pod" else (pod_file(tmp_path, {}), binary)
    refused(schedule(*args), str(binary), "not UTF-8 text")


def test_a_binary_workload_file_is_refused_naming_it(tmp_path: Path) -> None:
    binary = tmp_path / "workload.bin"
    binary.write_bytes(BINARY)
    refused(invoke("simulate", str(CLUSTER), str(binary)), str(binary), "not UTF-8 text")


def test_a_2_mib_manifest_is_refused_naming_the_object_limit(tmp_path: Path) -> None:
    big = pod_file(tmp_path, {"note": "x" * (2 * 1024 * 1024)})
    refused(schedule(big), str(big), "pod manifest is 2,", "the limit is 1,572,864 bytes")


def test_a_2_mib_manifest_on_stdin_is_refused_naming_the_limit(tmp_path: Path) -> None:
    big = pod_file(tmp_path, {"note": "x" * (2 * 1024 * 1024)})
    refused(schedule("-"), "standard input", "expected one Pod manifest")  # empty stdin
    result = invoke("simulate-schedule", "-", "--cluster", str(CLUSTER), stdin=big.read_bytes())
    refused(result, "standard input", "the limit is 1,572,864 bytes")


def test_300_kib_of_annotations_are_refused_naming_the_annotation_limit(tmp_path: Path) -> None:
    pod = pod_file(tmp_path, {f"example.com/k{i}": "v" * 1024 for i in range(300)})
    refused(schedule(pod), str(pod), "metadata.annotations", "the limit is 262144 bytes")


def test_300_kib_of_annotations_in_a_workload_pod_are_refused(tmp_path: Path) -> None:
    annotations = {f"example.com/k{i}": "v" * 1024 for i in range(300)}
    entry = {"name": "loud", "pod": {**POD, "metadata": {"annotations": annotations}}}
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump({"workloads": [entry]}), encoding="utf-8")
    refused(invoke("simulate", str(CLUSTER), str(workload)), str(workload), "262144 bytes")


@pytest.mark.parametrize("role", ["pod", "cluster"])
def test_deep_nesting_is_refused_naming_the_depth_limit(tmp_path: Path, role: str) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    args = (deep, CLUSTER) if role == "pod" else (pod_file(tmp_path, {}), deep)
    refused(schedule(*args), str(deep), "deeper than 100 levels")


def test_an_oversized_cluster_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    big = tmp_path / "cluster.yaml"
    big.write_bytes(CLUSTER.read_bytes() + b"#" + b"x" * (9 * 1024 * 1024) + b"\n")
    refused(schedule(pod_file(tmp_path, {}), big), str(big), "the limit is 8,388,608 bytes")


def _no_names(*_: object) -> list[str]:
    raise AssertionError("names were built before the total was checked")


def test_a_trace_over_the_total_is_refused_before_any_pod_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TraceEntry, "pod_names", _no_names)
    pod = {"spec": {"containers": [{"name": "c"}]}}
    entries = [{"name": f"w{i}", "replicas": 100_000, "pod": pod} for i in range(100)]
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump({"workloads": entries}), encoding="utf-8")
    refused(invoke("simulate", str(CLUSTER), str(workload)),
            str(workload), "10,000,000 pods in total", "the limit is 200,000 pods")  # fmt: skip


@pytest.mark.parametrize(
    ("replicas", "gpus", "fragment"),
    [
        (6_000, 1, "12,000 nodes in total: the limit is 10,000 nodes"),
        (5_000, 9, "90,000 GPUs in total: the limit is 80,000 GPUs"),
    ],
)
def test_a_cluster_over_its_totals_is_refused_before_any_node_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicas: int, gpus: int, fragment: str
) -> None:
    monkeypatch.setattr(NodeSpec, "node_names", _no_names)
    data = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    node = {**data["nodes"][0], "replicas": replicas}
    node["gpus"] = {**node["gpus"], "count": gpus, "overrides": []}
    data["nodes"] = [node, {**node, "name": "other"}]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(data), encoding="utf-8")
    refused(invoke("simulate", str(cluster), str(WORKLOAD)), str(cluster), fragment)


def test_the_bundled_example_still_runs() -> None:
    result = invoke("simulate", str(CLUSTER), str(WORKLOAD), "--quiet", "--no-alerts")
    assert result.exit_code == 0, result.output
