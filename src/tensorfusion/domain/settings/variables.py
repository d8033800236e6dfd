"""Environment-variable tables: one record per variable, from which a process both reads its
settings object and writes its `--help`.

A record names the variable, the settings field it fills (dotted for a nested settings object),
the type shown in the help, the help line and how the value is read. The default is the field's
own default on the settings dataclass, so it is declared once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.settings.environment_values import (
    env_bool,
    env_isolation_policy,
    env_port,
)

__all__ = [
    "Reader",
    "Variable",
    "Warned",
    "attribute_value",
    "read_boolean",
    "read_isolation_policy",
    "read_list",
    "read_port",
    "read_raw",
    "read_text",
    "read_text_or_empty",
    "read_variables",
]

Reader = Callable[[Mapping[str, str], str, Any], Any]
"""`(environment, variable, default) -> value`; raises EnvironmentValueError on a bad value."""


@dataclass(frozen=True, slots=True)
class Warned:
    """A value read with warnings to log (the variable was bad but has a fallback)."""

    value: Any
    warnings: tuple[str, ...] = ()


def read_text(env: Mapping[str, str], name: str, default: Any) -> Any:
    """Stripped text; empty or unset is the default."""
    return env.get(name, "").strip() or default


def read_text_or_empty(env: Mapping[str, str], name: str, default: Any) -> Any:
    """Stripped text; unset is the default, set but empty stays empty."""
    return env.get(name, default).strip()


def read_raw(env: Mapping[str, str], name: str, default: Any) -> Any:
    """The text as given (a password: spaces kept); unset is the default."""
    return env.get(name, default)


def read_boolean(env: Mapping[str, str], name: str, default: Any) -> Any:
    """`true`/`1`/`yes` or `false`/`0`/`no` (`env_bool`)."""
    return env_bool(env, name, bool(default))


def read_port(env: Mapping[str, str], name: str, default: Any) -> Any:
    """A TCP port 1..65535 (`env_port`)."""
    return env_port(env, name, int(default))


def read_isolation_policy(env: Mapping[str, str], name: str, default: Any) -> Any:
    """static or dynamic (`env_isolation_policy`; unset is static)."""
    del default
    return env_isolation_policy(env, name)


def read_list(env: Mapping[str, str], name: str, default: Any) -> Any:
    """A comma list, blanks dropped; unset or empty is the default."""
    items = tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())
    return items or default


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable of a process's settings."""

    name: str
    attribute: str
    """The settings field it fills; `tsdb.mysql_port` for a field of a nested settings object."""
    type: str
    help: str
    read: Reader = read_text
    default_text: str | None = None
    """The default as the help shows it, where the field's default is not the whole story
    (a fallback to another variable)."""


def attribute_value(settings: object, attribute: str) -> Any:
    """The value of a (dotted) attribute of a settings object."""
    value: Any = settings
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def read_variables(
    variables: Sequence[Variable], env: Mapping[str, str], defaults: object
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Each variable's value by attribute (dotted for nested ones), in table order, the
    field's default on `defaults` when unset; and the warnings of values read with a fallback."""
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for variable in variables:
        value = variable.read(env, variable.name, attribute_value(defaults, variable.attribute))
        if isinstance(value, Warned):
            warnings.extend(value.warnings)
            value = value.value
        values[variable.attribute] = value
    return values, tuple(warnings)
