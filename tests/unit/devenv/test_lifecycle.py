"""The dev environment's directory: PID files of live processes, a second `dev up` refused,
`dev down` stopping exactly the recorded processes; the CLI's exit codes on bad input."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.devenv.lifecycle import (
    AlreadyRunningError,
    component_log,
    running_description,
    spawn_supervisor,
    stop,
)
from tensorfusion.devenv.processes import pid_file_process, session_processes, write_pid_file
from tensorfusion.devenv.state_dir import ComponentInfo, DevDirectory, DevPhase, DevState

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes in sessions of their own, killed at the end whatever happened."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _sleeper(started: list[subprocess.Popen[bytes]], *, children: bool = False) -> int:
    code = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    argv = [sys.executable, "-c", code] if children else ["sleep", "300"]
    process = subprocess.Popen(argv, start_new_session=True)
    started.append(process)
    return process.pid


def test_pid_files_name_live_processes_only(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    dev = DevDirectory(tmp_path)
    dev.create()
    pid = _sleeper(sleepers)
    write_pid_file(dev.pid_file("etcd"), pid)
    assert pid_file_process(dev.pid_file("etcd")) == pid
    (dev.pids / "reused.pid").write_text(f"{pid} 1\n")  # same PID, another start time
    (dev.pids / "garbage.pid").write_text("not a pid\n")
    assert dev.running_processes() == {"etcd": pid}


def test_a_second_up_names_the_running_one_and_changes_nothing(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    dev = DevDirectory(tmp_path)
    dev.create()
    write_pid_file(dev.supervisor_pid_file, _sleeper(sleepers))
    dev.write_state(DevState(phase=DevPhase.READY))
    message = running_description(dev)
    assert message is not None and f"already runs in {dev.path}" in message
    assert "Ready" in message
    with pytest.raises(AlreadyRunningError, match="already runs"):
        spawn_supervisor(dev, EXAMPLE, [])
    assert dev.read_state() == DevState(phase=DevPhase.READY)


def test_left_over_processes_also_block_a_new_environment(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    dev = DevDirectory(tmp_path)
    dev.create()
    write_pid_file(dev.pid_file("kube-apiserver"), _sleeper(sleepers))
    message = running_description(dev)
    assert message is not None and "kube-apiserver (pid" in message


def test_down_stops_every_recorded_process_and_its_children(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    dev = DevDirectory(tmp_path)
    dev.create()
    pids = {"supervisor": _sleeper(sleepers), "controller-0": _sleeper(sleepers, children=True)}
    for name, pid in pids.items():
        write_pid_file(dev.pid_file(name), pid)
    dev.write_state(DevState(phase=DevPhase.READY))
    report = stop(dev, timeout_s=10)
    assert sorted(report.stopped + report.killed) == ["controller-0", "supervisor"]
    assert not report.left and not report.ports_in_use
    assert not any(session_processes(pid) for pid in pids.values())
    assert not list(dev.pids.glob("*.pid"))
    state = dev.read_state()
    assert state is not None and state.phase == DevPhase.STOPPED


def test_component_logs_are_found_by_name(tmp_path: Path) -> None:
    dev = DevDirectory(tmp_path)
    dev.create()
    dev.write_state(DevState(components={"etcd": ComponentInfo(pid=1, log="/x/etcd.log")}))
    assert component_log(dev, "etcd") == Path("/x/etcd.log")
    assert component_log(dev, "supervisor") == dev.logs / "supervisor.log"
    with pytest.raises(KeyError, match="components: etcd, supervisor"):
        component_log(dev, "etc")


def test_a_broken_cluster_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    broken = tmp_path / "cluster.yaml"
    broken.write_text(EXAMPLE.read_text().replace("count: 8", "count: many", 1))
    result = CliRunner().invoke(app, ["dev", "up", "--dir", str(tmp_path / "d"),
                                      "--cluster", str(broken)])  # fmt: skip
    assert result.exit_code == 2
    assert "nodes[0].gpus.count: invalid value 'many'" in " ".join(result.output.split())
    assert not (tmp_path / "d").exists()


def test_a_missing_values_file_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["dev", "up", "--dir", str(tmp_path / "d"),
                                      "--values", str(tmp_path / "nope.yaml")])  # fmt: skip
    assert result.exit_code == 2
    assert "nope.yaml: no such file" in result.output
    assert not (tmp_path / "d").exists()


def test_status_and_logs_of_nothing(tmp_path: Path) -> None:
    status = CliRunner().invoke(app, ["dev", "status", "--dir", str(tmp_path)])
    assert status.exit_code == 1 and "no dev environment runs" in status.output
    logs = CliRunner().invoke(app, ["dev", "logs", "nope", "--dir", str(tmp_path)])
    assert logs.exit_code == 2 and "no component 'nope'" in logs.output
    down = CliRunner().invoke(app, ["dev", "down", "--dir", str(tmp_path)])
    assert down.exit_code == 0 and "nothing ran" in down.output
