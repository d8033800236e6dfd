"""The dev environment's directory: what runs, where, and how far it got.

Layout (default `~/.local/state/tensor-fusion/dev`):

- `state.json`: the `DevState` the supervisor keeps (phase, step, addresses, components, the
  error of a failed start), replaced atomically on every change;
- `pids/NAME.pid`: `PID START_TIME` of every process started (the supervisor's is
  `supervisor.pid`), each in a session of its own; `dev down` stops exactly these;
- `ports.json`: the loopback ports chosen (free when chosen);
- `kubeconfig`: the administrator's kubeconfig of the control plane;
- `logs/`, `cluster/`, `controllers/`, `agents/`, `alertmanagers/`: logs and working files.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from tensorfusion.devenv.processes import pid_file_process

__all__ = [
    "DEFAULT_DIR",
    "ComponentInfo",
    "DevDirectory",
    "DevPhase",
    "DevState",
    "default_dir",
]

SUPERVISOR = "supervisor"


def default_dir() -> Path:
    """`$XDG_STATE_HOME/tensor-fusion/dev`, by default `~/.local/state/tensor-fusion/dev`."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "tensor-fusion" / "dev"


DEFAULT_DIR = default_dir()


class DevPhase(StrEnum):
    """Where the dev environment is."""

    STARTING = "Starting"
    READY = "Ready"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"


class ComponentInfo(BaseModel):
    """One process of the dev environment."""

    pid: int | None = None
    log: str = ""
    address: str = ""
    """What it serves, if anything (a URL or host:port)."""


class DevState(BaseModel):
    """What `state.json` holds."""

    phase: DevPhase = DevPhase.STARTING
    step: str = ""
    """What the supervisor does now (while Starting)."""
    steps_done: list[str] = Field(default_factory=list)
    error: str = ""
    cluster_file: str = ""
    values_files: list[str] = Field(default_factory=list)
    started_at: float = 0.0
    ready_at: float | None = None
    kubeconfig: str = ""
    api_server: str = ""
    controller_api: str = ""
    """The controller's HTTP API (what the guide reaches with `kubectl port-forward`)."""
    controller_peer: str = ""
    """The controllers' peer port behind one address (the agents' metric writes, HTTPS)."""
    webhook: str = ""
    alertmanagers: list[str] = Field(default_factory=list)
    nodes: int = 0
    gpus: int = 0
    gpus_running: int = 0
    notes: list[str] = Field(default_factory=list)
    components: dict[str, ComponentInfo] = Field(default_factory=dict)


class DevDirectory:
    """Reading and writing the files of one dev environment directory."""

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().resolve()
        self.pids = self.path / "pids"
        self.logs = self.path / "logs"
        self.state_file = self.path / "state.json"
        self.ports_file = self.path / "ports.json"
        self.kubeconfig = self.path / "kubeconfig"

    def create(self) -> None:
        """Make the directory and its `pids/` and `logs/`."""
        for directory in (self.path, self.pids, self.logs):
            directory.mkdir(parents=True, exist_ok=True)

    def pid_file(self, name: str) -> Path:
        """The PID file of process `name`."""
        return self.pids / f"{name}.pid"

    @property
    def supervisor_pid_file(self) -> Path:
        """The supervisor's PID file."""
        return self.pid_file(SUPERVISOR)

    def supervisor(self) -> int | None:
        """The supervisor's PID while it runs."""
        return pid_file_process(self.supervisor_pid_file)

    def running_processes(self) -> dict[str, int]:
        """Every recorded process that still runs, by name."""
        found: dict[str, int] = {}
        for path in sorted(self.pids.glob("*.pid")) if self.pids.is_dir() else ():
            pid = pid_file_process(path)
            if pid is not None:
                found[path.stem] = pid
        return found

    def read_state(self) -> DevState | None:
        """`state.json`, or None when there is none (or it cannot be read)."""
        try:
            return DevState.model_validate_json(self.state_file.read_bytes())
        except (OSError, ValueError):
            return None

    def write_state(self, state: DevState) -> None:
        """Replace `state.json` atomically."""
        _write_atomically(self.state_file, state.model_dump_json(indent=2))

    def write_ports(self, endpoints: dict[str, str]) -> None:
        """Replace `ports.json`."""
        _write_atomically(self.ports_file, DevPorts(endpoints=endpoints).model_dump_json(indent=2))

    def read_ports(self) -> dict[str, str]:
        """The endpoints recorded in `ports.json` ({} if none)."""
        try:
            return DevPorts.model_validate_json(self.ports_file.read_bytes()).endpoints
        except (OSError, ValueError):
            return {}


class DevPorts(BaseModel):
    """`ports.json`: what listens where, as `host:port` on loopback, by name."""

    endpoints: dict[str, str] = Field(default_factory=dict)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)
