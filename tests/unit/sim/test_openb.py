"""The openb trace: CSV reading, conversion, workload inflation and the inflation curve."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.sim.inflation import inflation_curve, inflation_table
from tensorfusion.sim.input_errors import InputError
from tensorfusion.sim.native_pods import is_native
from tensorfusion.sim.openb import MODEL_LABEL, inflated, load_openb
from tensorfusion.sim.openb_csv import read_tasks

NODES = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0,64000,262144,2,T4
openb-node-1,96000,393216,8,G2
"""
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
TASKS = (
    HEADER
    + """share,4000,8192,1,250,,LS,Running,0,100,0
whole,8000,16384,2,1000,T4|G2,LS,Running,10,50,10
cpu,2000,4096,0,0,,BE,Running,20,30,20
"""
)


def files(tmp_path: Path, tasks: str = TASKS) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES, encoding="utf-8")
    pods.write_text(tasks, encoding="utf-8")
    return nodes, pods


def test_tasks_become_percent_shares_whole_cards_and_native_pods(tmp_path: Path) -> None:
    run = load_openb(*files(tmp_path))
    assert run.cluster_gpus == 10 and run.until is None
    assert {h.model for h in run.cluster.hardware} == {"T4", "G2"}
    share, whole, cpu = (e.pod for e in run.workload.workloads)
    assert share["metadata"]["annotations"] == {
        "tensor-fusion.ai/gpu-count": "1",
        "tensor-fusion.ai/compute-percent-request": "25",
    }
    assert whole["metadata"]["annotations"]["tensor-fusion.ai/gpu-count"] == "2"
    assert whole["metadata"]["annotations"]["tensor-fusion.ai/compute-percent-request"] == "100"
    term = whole["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": MODEL_LABEL, "operator": "In",
                                         "values": ["T4", "G2"]}]  # fmt: skip
    assert is_native(cpu) and not is_native(share)
    assert cpu["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "2000m",
        "memory": "4096Mi",
    }
    assert [(e.arrival, e.duration) for e in run.workload.workloads] == [
        (0, 100),
        (10, 40),
        (20, 10),
    ]
    assert run.gpu_requests == (0.25, 2.0, 0.0)


@pytest.mark.parametrize(
    ("row", "column", "allowed"),
    [
        ("x,1,1,1,0,,LS,Running,0,1,0", "gpu_milli", "1 to 1000"),
        ("x,1,1,2,500,,LS,Running,0,1,0", "gpu_milli", "whole cards: 1000"),
        ("x,1,1,1,500,H100,LS,Running,0,1,0", "gpu_spec", "allowed models"),
        ("x,many,1,0,0,,LS,Running,0,1,0", "cpu_milli", "an integer >= 0"),
        ("x,1,1,0,0,,LS,Running,5,1,0", "deletion_time", "must not be before"),
    ],
)
def test_a_bad_task_row_names_file_line_column_value_and_what_is_allowed(
    tmp_path: Path, row: str, column: str, allowed: str
) -> None:
    _, pods = files(tmp_path, TASKS.splitlines()[0] + "\n" + row + "\n")
    with pytest.raises(InputError) as error:
        read_tasks(pods)
    message = str(error.value)
    assert message.startswith(f"{pods}: line 2: column {column}: invalid value ")
    assert allowed in message


def test_inflation_draws_until_the_factor_and_repeats_per_seed(tmp_path: Path) -> None:
    tasks = read_tasks(files(tmp_path)[1])
    drawn = inflated(tasks, 1.3, 7, 10)
    total = sum(t.gpu_request for t in drawn)
    assert total >= 13 and total - drawn[-1].gpu_request < 13
    assert drawn == inflated(tasks, 1.3, 7, 10)
    assert drawn != inflated(tasks, 1.3, 8, 10)


def test_the_curve_has_a_point_at_least_every_percent_and_the_table_every_ten() -> None:
    requests = [0.25] * 60 + [3.0]
    placed = [True] * 50 + [False] * 10 + [True]
    curve = inflation_curve(requests, placed, 100, 1.8, 3)
    assert set(curve) == {"factor", "seed", "clusterGpus", "points"}
    points = curve["points"]
    arrived = [p["arrivedPercent"] for p in points]
    assert arrived[0] == 1.0 and arrived[-2] == 15.0
    assert all(b - a <= 1 for a, b in itertools.pairwise(arrived[:-1]))
    assert points[-1] == {"arrivedPercent": 18.0, "allocatedPercent": 15.5}
    assert points[-2] == {"arrivedPercent": 15.0, "allocatedPercent": 12.5}
    assert inflation_table(curve) == [(10.0, 10.0)]
    assert inflation_table(curve, 5.0) == [(5.0, 5.0), (10.0, 10.0), (15.0, 12.5)]


def test_simulate_openb_inflation_writes_the_curve(tmp_path: Path) -> None:
    nodes, pods = files(tmp_path)
    output = tmp_path / "report.json"
    result = CliRunner().invoke(app, [
        "simulate", "--openb", str(nodes), str(pods), "--inflate", "1.3", "--seed", "5",
        "--no-alerts", "--output", str(output),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "GPU allocation against arrived workload" in result.output
    curve = json.loads(output.read_text(encoding="utf-8"))["inflation"]
    assert (curve["factor"], curve["seed"], curve["clusterGpus"]) == (1.3, 5, 10)
    last = curve["points"][-1]
    assert last["arrivedPercent"] >= 130 and 0 < last["allocatedPercent"] <= 100


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--inflate", "0"], "--inflate: invalid value 0.0"),
        (["--seed", "3"], "--seed: only with --inflate"),
        (["extra.yaml"], "either --openb"),
    ],
)
def test_simulate_openb_refuses_bad_flags_with_exit_2(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    nodes, pods = files(tmp_path)
    result = CliRunner().invoke(app, ["simulate", "--openb", str(nodes), str(pods), *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
