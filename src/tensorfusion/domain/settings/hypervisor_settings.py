"""The one settings object of `tensor-fusion hypervisor`: its flags (`HYPERVISOR_FLAGS`) and
environment (`HYPERVISOR_VARIABLES`), and the `--help` text written from those two tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.settings.controller_flags import FlagError, FlagSpec, parse_flags
from tensorfusion.domain.settings.hypervisor_environment import (
    HYPERVISOR_VARIABLES,
    HypervisorEnvironment,
)
from tensorfusion.domain.settings.usage import flag_lines, variable_lines

__all__ = ["HYPERVISOR_FLAGS", "HypervisorFlags", "HypervisorSettings", "hypervisor_usage"]


@dataclass(frozen=True, slots=True)
class HypervisorFlags:
    """The node agent's flags, with their defaults when absent."""

    kubeconfig: str | None = None
    discovery_interval_s: float | None = None
    """`--discovery-interval`: overrides `TF_DISCOVERY_INTERVAL`."""
    log_format: Literal["text", "json"] = "text"


def _path(flag: str, value: str) -> str:
    if not value:
        raise FlagError(f'-{flag}: invalid value "": must be a file path')
    return value


def _seconds(flag: str, value: str) -> float:
    try:
        return parse_go_duration(value) / 1e9
    except DurationError as error:
        raise FlagError(str(error)) from None


def _log_format(flag: str, value: str) -> Any:
    if value not in ("text", "json"):
        raise FlagError(f'-{flag}: invalid value "{value}": must be one of text, json')
    return value


HYPERVISOR_FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("kubeconfig", "kubeconfig", False, _path, value="path",
             default_text='"" (the in-cluster configuration)',
             help="The kubeconfig file, out of a pod."),
    FlagSpec("discovery-interval", "discovery_interval_s", False, _seconds, value="duration",
             default_text='"" (TF_DISCOVERY_INTERVAL)',
             help="How often devices are discovered (a Go duration such as 10m)."),
    FlagSpec("log-format", "log_format", False, _log_format, value="text|json",
             help="Log lines as text or one JSON object per line."),
)  # fmt: skip
"""Every flag of the node agent."""


@dataclass(frozen=True, slots=True)
class HypervisorSettings:
    """A node agent's settings: its flags and its pod's environment."""

    flags: HypervisorFlags
    env: HypervisorEnvironment

    @classmethod
    def read(cls, argv: Sequence[str], environ: Mapping[str, str]) -> HypervisorSettings:
        """Flags and environment; FlagError or EnvironmentValueError names what is wrong."""
        values, _, _ = parse_flags(argv, HYPERVISOR_FLAGS, "the node agent")
        return cls(HypervisorFlags(**values), HypervisorEnvironment.from_mapping(environ))

    @property
    def discovery_interval_s(self) -> float:
        """`--discovery-interval`, else `TF_DISCOVERY_INTERVAL`."""
        flag = self.flags.discovery_interval_s
        return self.env.discovery_interval_s if flag is None else flag


def hypervisor_usage() -> str:
    """Every flag and environment variable of the node agent with its type, default and help."""
    return "\n".join([
        "Flags (one or two dashes, -flag value or -flag=value):",
        *flag_lines(HYPERVISOR_FLAGS, HypervisorFlags()),
        "",
        "Environment variables (rendered into the agent's pod; unset is the default):",
        *variable_lines(HYPERVISOR_VARIABLES, HypervisorEnvironment(node="")),
    ])  # fmt: skip
