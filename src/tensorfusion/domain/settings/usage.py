"""The `--help` text of a process: every flag and environment variable of its tables with the
type, the default (read from the settings object) and the help line, in Go's `flag` layout."""

from __future__ import annotations

import enum
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tensorfusion.domain.settings.controller_flags import FlagSpec
from tensorfusion.domain.settings.variables import Variable, attribute_value

__all__ = ["flag_default", "flag_lines", "format_default", "variable_default", "variable_lines"]

_WIDTH: Final = 76
_INDENT: Final = " " * 6


def format_default(value: Any, type_: str = "") -> str:
    """A default as the help shows it: booleans and numbers bare, text quoted, lists comma
    joined, durations in seconds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return f'"{value.value}"'
    if type_ == "duration" and isinstance(value, int | float):
        return f"{value:g}s"
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return f'"{",".join(str(item) for item in value)}"'
    if isinstance(value, Mapping):
        return f'"{",".join(f"{k}={v}" for k, v in value.items())}"'
    return f'"{value}"'


def flag_default(spec: FlagSpec, defaults: object) -> str:
    """The default of a flag as its help line shows it."""
    if spec.default_text is not None:
        return spec.default_text
    assert spec.attribute is not None, f"-{spec.name} needs a default_text"
    return format_default(attribute_value(defaults, spec.attribute), spec.value)


def variable_default(variable: Variable, defaults: object) -> str:
    """The default of a variable as its help line shows it."""
    if variable.default_text is not None:
        return variable.default_text
    return format_default(attribute_value(defaults, variable.attribute), variable.type)


def _entry(head: str, help_: str) -> list[str]:
    return [head, *textwrap.wrap(help_, _WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT)]


def flag_lines(specs: Sequence[FlagSpec], defaults: object) -> list[str]:
    """`  -name type (default X)` then the wrapped help, for each flag."""
    lines: list[str] = []
    for spec in specs:
        value = "" if spec.boolean else f" {spec.value}"
        lines += _entry(f"  -{spec.name}{value} (default {flag_default(spec, defaults)})",
                        spec.help)  # fmt: skip
    return lines


def variable_lines(variables: Sequence[Variable], defaults: object) -> list[str]:
    """`  NAME type (default X)` then the wrapped help, for each variable."""
    lines: list[str] = []
    for variable in variables:
        head = f"  {variable.name} {variable.type} (default {variable_default(variable, defaults)})"
        lines += _entry(head, variable.help)
    return lines
