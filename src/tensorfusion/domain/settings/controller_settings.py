"""The one settings object of `tensor-fusion controller`: its flags (`FLAGS`) and environment
(`CONTROLLER_VARIABLES`), and the `--help` text written from those two tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tensorfusion.domain.settings.controller_environment import (
    CONTROLLER_VARIABLES,
    ControllerEnvironment,
)
from tensorfusion.domain.settings.controller_flags import (
    FLAGS,
    ControllerFlags,
    parse_controller_flags,
)
from tensorfusion.domain.settings.usage import flag_lines, variable_lines

__all__ = ["ControllerSettings", "controller_usage"]


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """A controller replica's settings; the defaults are those out of a pod with no flag."""

    flags: ControllerFlags = field(default_factory=ControllerFlags)
    env: ControllerEnvironment = field(default_factory=ControllerEnvironment)

    @classmethod
    def read(cls, argv: Sequence[str], environ: Mapping[str, str]) -> ControllerSettings:
        """Flags and environment; FlagError or EnvironmentValueError names what is wrong."""
        return cls(parse_controller_flags(argv), ControllerEnvironment.from_mapping(environ))


def controller_usage() -> str:
    """Every flag and environment variable of the controller with its type, default and help."""
    defaults = ControllerSettings()
    return "\n".join([
        "Flags (Go style: one or two dashes, -flag value or -flag=value, booleans bare or "
        "=true|false):",
        *flag_lines(FLAGS, defaults.flags),
        "",
        "Environment variables (set by the chart; unset is the default):",
        *variable_lines(CONTROLLER_VARIABLES, defaults.env),
    ])  # fmt: skip
