"""The node's MPS control daemon as the agent supervises it (hypervisor.md, *GPU isolation*):
when it is needed, its state, the control commands the agent sends and what their answers mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

__all__ = [
    "GET_SERVER_LIST",
    "MPS_V3_DRIVER_MAJOR",
    "QUIT",
    "MpsCommandError",
    "MpsState",
    "MpsStatus",
    "daemon_needed",
    "mps_protocol",
    "parse_server_list",
]

GET_SERVER_LIST: Final = "get_server_list"
QUIT: Final = "quit"
MPS_V3_DRIVER_MAJOR: Final = 615
"""The first driver branch with MPS v3 (per-container memory limits); see `mps_protocol`."""
MAX_ANSWER_BYTES: Final = 64 * 1024
_PID: Final = re.compile(r"^\d{1,10}$")


class MpsCommandError(RuntimeError):
    """A control command failed: no daemon, a timeout, or an answer that is not understood."""


class MpsState(StrEnum):
    """The daemon as the agent last saw it."""

    OFF = "Off"
    """Not needed on this node (or turned off with `TF_MPS=off`)."""
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    """It died or stopped answering; the agent starts it again after a backoff."""
    FAILED = "Failed"
    """It cannot start (binary missing, compute mode refused); retried with backoff."""


@dataclass(frozen=True, slots=True)
class MpsStatus:
    """`GPUNode.status.hypervisorStatus.mps`."""

    state: MpsState = MpsState.OFF
    restarts: int = 0
    message: str = ""
    protocol: int = 2
    """2: legacy MPS (limits in each client's environment); 3: the driver has MPS v3."""

    @property
    def serving(self) -> bool:
        """Workers can connect now."""
        return self.state is MpsState.RUNNING

    def to_json(self) -> dict[str, Any]:
        """The status field."""
        body: dict[str, Any] = {"state": self.state.value, "restarts": self.restarts,
                                "protocol": self.protocol}  # fmt: skip
        if self.message:
            body["message"] = self.message[:1024]
        return body


def daemon_needed(mode: IsolationMode, policy: IsolationPolicy) -> bool:
    """Whether a node of this isolation mode and policy runs the daemon: soft and hard GPUs, and
    every GPU under the dynamic policy (its mode follows the pods placed on it)."""
    return mode in (IsolationMode.SOFT, IsolationMode.HARD) or policy is IsolationPolicy.DYNAMIC


def mps_protocol(driver_version: str) -> int:
    """3 when the driver's major version is `MPS_V3_DRIVER_MAJOR` or later, else 2 (also for a
    version that cannot be read)."""
    major, _, _ = driver_version.strip().partition(".")
    return 3 if major.isdigit() and int(major) >= MPS_V3_DRIVER_MAJOR else 2


def parse_server_list(answer: str) -> tuple[int, ...]:
    """The server PIDs of a `get_server_list` answer (one per line; empty when none runs)."""
    pids = []
    for line in answer.splitlines():
        text = line.strip()
        if not text:
            continue
        if not _PID.match(text):
            raise MpsCommandError(f"get_server_list answered {text[:80]!r}, not a PID")
        pids.append(int(text))
    return tuple(pids)
