"""`tensor-fusion simulate --openb`: the five-column task lists, and bounded, checked CSV files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tensorfusion.cli.main import app
from tensorfusion.sim import openb, openb_csv

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,T4\nn-1,96000,393216,8,G2\n"
FIVE_COLUMNS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    "share,4000,8192,1,250\n"
    "whole,8000,16384,2,1000\n"
    "cpu,2000,4096,0,0\n"
)


def files(tmp_path: Path, tasks: str, nodes: str = NODES) -> tuple[Path, Path]:
    nodes_csv, tasks_csv = tmp_path / "nodes.csv", tmp_path / "tasks.csv"
    nodes_csv.write_text(nodes, encoding="utf-8")
    tasks_csv.write_text(tasks, encoding="utf-8")
    return nodes_csv, tasks_csv


def simulate(nodes: Path, tasks: Path, *flags: str) -> Result:
    args = ["simulate", "--openb", str(nodes), str(tasks), "--no-alerts", "--quiet", *flags]
    return CliRunner().invoke(app, args)


def refused(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def test_a_five_column_task_list_runs_the_inflation_experiment(tmp_path: Path) -> None:
    nodes, tasks = files(tmp_path, FIVE_COLUMNS)
    output = tmp_path / "report.json"
    result = simulate(nodes, tasks, "--inflate", "1.3", "--output", str(output))
    assert result.exit_code == 0, result.output
    curve = json.loads(output.read_text(encoding="utf-8"))["inflation"]
    assert curve["clusterGpus"] == 10 and curve["points"][-1]["arrivedPercent"] >= 130


def test_a_five_column_task_list_cannot_be_replayed_as_recorded(tmp_path: Path) -> None:
    nodes, tasks = files(tmp_path, FIVE_COLUMNS)
    refused(simulate(nodes, tasks), str(tasks), "creation_time, deletion_time", "--inflate")


def test_a_task_list_without_a_needed_column_is_refused(tmp_path: Path) -> None:
    nodes, tasks = files(tmp_path, FIVE_COLUMNS.replace(",gpu_milli", ""))
    refused(simulate(nodes, tasks, "--inflate", "1"), str(tasks), "lacks the column(s) gpu_milli")


@pytest.mark.parametrize(
    ("tasks", "fragment"),
    [
        (b"\x89PNG\r\n\x1a\n\xff\xfe\x00", "not UTF-8 text"),
        (FIVE_COLUMNS.encode() + b"x," + b"1" * 200_000 + b",1,0,0\n", "not valid CSV"),
        (FIVE_COLUMNS.encode() + b"x," + b"9" * 5000 + b",1,0,0\n", "column cpu_milli"),
        (FIVE_COLUMNS.encode() + "x,²,1,0,0\n".encode(), "column cpu_milli"),
    ],
)
def test_a_broken_task_list_is_refused_naming_it(
    tmp_path: Path, tasks: bytes, fragment: str
) -> None:
    nodes, tasks_csv = files(tmp_path, "")
    tasks_csv.write_bytes(tasks)
    refused(simulate(nodes, tasks_csv, "--inflate", "1"), str(tasks_csv), fragment)


def _no_trace(*_: object) -> None:
    raise AssertionError("the trace was built past the limit")


def test_an_inflation_past_the_trace_total_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,280 GPUs at factor 10 with tasks of 1/1000 GPU: 12.8 million draws, over the limit.
    monkeypatch.setattr(openb, "openb_workload", _no_trace)
    many = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n-{i},64000,262144,128,T4\n" for i in range(10)
    )
    nodes, tasks = files(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt,1,1,1,1\n", many)
    refused(simulate(nodes, tasks, "--inflate", "10"), str(tasks), "the limit is 200,000 pods")


def test_a_node_list_over_its_rows_is_refused(tmp_path: Path) -> None:
    rows = "".join(f"n-{i},64000,262144,1,T4\n" for i in range(10_001))
    nodes, tasks = files(tmp_path, FIVE_COLUMNS, "sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    refused(simulate(nodes, tasks, "--inflate", "1"), str(nodes), "the limit is 10,000 rows")


def test_a_node_list_over_the_cluster_gpus_is_refused(tmp_path: Path) -> None:
    rows = "".join(f"n-{i},64000,262144,128,T4\n" for i in range(700))
    nodes, tasks = files(tmp_path, FIVE_COLUMNS, "sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    refused(simulate(nodes, tasks, "--inflate", "1"), str(nodes), "the limit is 80,000 GPUs")


def test_an_oversized_csv_file_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openb_csv, "MAX_OPENB_FILE_BYTES", 64)
    nodes, tasks = files(tmp_path, FIVE_COLUMNS)
    refused(simulate(nodes, tasks, "--inflate", "1"), str(nodes), "the limit is 64 bytes")
