"""`dev up`, `dev status`, `dev down` and `dev logs` without their display: starting the
supervisor in a session of its own, following its `state.json`, and stopping exactly the
processes its PID files name."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tensorfusion.devenv.binaries import Binaries, MissingBinariesError
from tensorfusion.devenv.processes import (
    component_environment,
    kill_session,
    pid_file_process,
    process_alive,
    session_processes,
    write_pid_file,
)
from tensorfusion.devenv.source_tree import BUILD_SCRIPT, EXECUTABLE
from tensorfusion.devenv.state_dir import DevDirectory, DevPhase, DevState

__all__ = [
    "AlreadyRunningError",
    "DevStartError",
    "StopReport",
    "build_binaries",
    "component_log",
    "locate_binaries",
    "spawn_supervisor",
    "stop",
    "wait_until_settled",
]

_WORK_ENTRIES = ("cluster", "controllers", "agents", "alertmanagers", "logs", "pids",
                 "state.json", "ports.json", "kubeconfig", "dev-values.yaml", "hosts")  # fmt: skip
STOP_TIMEOUT_S = 90.0


class AlreadyRunningError(RuntimeError):
    """A dev environment (or what is left of one) runs in the directory."""


class DevStartError(RuntimeError):
    """The supervisor could not start the environment; the message says where it stopped."""


def running_description(directory: DevDirectory) -> str | None:
    """What already runs in `directory`, in words; None when nothing does."""
    supervisor = directory.supervisor()
    state = directory.read_state()
    if supervisor is not None:
        phase = state.phase if state else "starting"
        return (f"a dev environment already runs in {directory.path} (supervisor pid "
                f"{supervisor}, {phase}; KUBECONFIG={directory.kubeconfig})")  # fmt: skip
    left = directory.running_processes()
    if left:
        names = ", ".join(f"{name} (pid {pid})" for name, pid in sorted(left.items()))
        return f"processes of an earlier dev environment in {directory.path} still run: {names}"
    return None


@contextlib.contextmanager
def _locked(directory: DevDirectory) -> Iterator[None]:
    """Held while one `dev up` checks the directory and starts the supervisor."""
    directory.path.mkdir(parents=True, exist_ok=True)
    with (directory.path / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunningError(
                f"another `tensor-fusion dev up` is starting in {directory.path}"
            ) from None
        yield


def locate_binaries() -> Binaries | None:
    """The built control-plane binaries, or None when they must be built."""
    try:
        return Binaries.locate()
    except MissingBinariesError:
        return None


def build_binaries(log: Path, on_line: Callable[[str], None]) -> None:
    """Run `testenv/build.sh` (minutes on first use, cached under ~/.cache), its output into
    `log`; raises DevStartError naming the log when it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=component_environment(),
        )  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            out.flush()
            on_line(line.rstrip())
        code = process.wait()
    if code != 0:
        raise DevStartError(f"building the control plane failed (exit {code}); see {log}")


def spawn_supervisor(
    directory: DevDirectory, cluster_file: Path, values_files: Sequence[Path]
) -> int:
    """Start `tensor-fusion dev serve` in a session of its own on a clean directory; its PID.

    Raises AlreadyRunningError naming what runs in the directory.
    """
    with _locked(directory):
        running = running_description(directory)
        if running is not None:
            raise AlreadyRunningError(running)
        for entry in _WORK_ENTRIES:
            path = directory.path / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        directory.create()
        argv = [str(EXECUTABLE), "dev", "serve", "--dir", str(directory.path),
                "--cluster", str(cluster_file)]  # fmt: skip
        for values in values_files:
            argv += ["--values", str(values)]
        with (directory.logs / "supervisor.log").open("ab") as log:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=component_environment(),
            )  # fmt: skip
        write_pid_file(directory.supervisor_pid_file, process.pid)
        return process.pid


def wait_until_settled(
    directory: DevDirectory,
    supervisor: int,
    on_state: Callable[[DevState], None],
    timeout_s: float,
) -> DevState:
    """Follow `state.json` until the environment is Ready; raises DevStartError when it failed,
    its supervisor died or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = directory.read_state()
        if state is not None:
            on_state(state)
            if state.phase == DevPhase.READY:
                return state
            if state.phase in (DevPhase.FAILED, DevPhase.STOPPED):
                raise DevStartError(state.error or f"the environment is {state.phase}")
        if pid_file_process(directory.supervisor_pid_file) != supervisor:
            raise DevStartError(
                f"the supervisor (pid {supervisor}) exited; see {directory.logs / 'supervisor.log'}"
            )
        if time.monotonic() > deadline:
            step = state.step if state else "starting"
            raise DevStartError(f"not Ready after {timeout_s:.0f}s (at: {step})")
        time.sleep(0.2)


@dataclass
class StopReport:
    """What `dev down` did."""

    stopped: list[str] = field(default_factory=list)
    """Processes that ended when asked (SIGTERM)."""
    killed: list[str] = field(default_factory=list)
    """Processes that had to be killed."""
    left: list[str] = field(default_factory=list)
    """Processes still there (should be empty)."""
    ports_in_use: list[str] = field(default_factory=list)
    """Recorded endpoints something still listens on (should be empty)."""


def stop(directory: DevDirectory, timeout_s: float = STOP_TIMEOUT_S) -> StopReport:
    """Stop the supervisor (it stops what it started), then whatever a PID file still names;
    report what is left."""
    report = StopReport()
    recorded = directory.running_processes()
    supervisor = recorded.pop("supervisor", None)
    if supervisor is not None:
        if _terminate(supervisor, timeout_s):
            report.stopped.append("supervisor")
        else:
            report.killed.append("supervisor")
    still = directory.running_processes()
    for name, pid in sorted({**recorded, **still}.items()):
        if name not in still or _terminate(pid, 20.0):
            report.stopped.append(name)
        else:
            report.killed.append(name)
    for name, pid in sorted({**recorded, **({"supervisor": supervisor} if supervisor else {})}
                            .items()):  # fmt: skip
        kill_session(pid)
        if not _session_ended(pid):
            report.left.append(name)
    for path in directory.pids.glob("*.pid") if directory.pids.is_dir() else ():
        if pid_file_process(path) is None:
            path.unlink(missing_ok=True)
    report.ports_in_use = [
        f"{name} {endpoint}"
        for name, endpoint in sorted(directory.read_ports().items())
        if _listening(endpoint)
    ]
    state = directory.read_state()
    if state is not None and state.phase != DevPhase.STOPPED:
        state.phase = DevPhase.STOPPED
        directory.write_state(state)
    return report


def _terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, then SIGKILL after `timeout_s`; True when SIGTERM was enough."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while process_alive(pid):
        time.sleep(0.05)
    return False


def _session_ended(session: int, timeout_s: float = 5.0) -> bool:
    """Whether every process of `session` is gone (SIGKILL takes a moment)."""
    deadline = time.monotonic() + timeout_s
    while session_processes(session):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _listening(endpoint: str) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except (OSError, ValueError):
        return False


def component_log(directory: DevDirectory, component: str) -> Path:
    """The log file of `component` (`supervisor` included); KeyError names the known ones."""
    logs = {"supervisor": str(directory.logs / "supervisor.log")}
    state = directory.read_state()
    if state is not None:
        logs.update({name: info.log for name, info in state.components.items() if info.log})
    if component not in logs:
        raise KeyError(f"no component {component!r}; components: {', '.join(sorted(logs))}")
    return Path(logs[component])
