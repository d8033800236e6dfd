"""`controller.command` read with the controller's own flag parser (`parse_controller_flags`).

The command is split into flags (a flag and, for a flag that takes one, its value), each parsed
alone by the controller's parser, so every bad flag is named and the checks can still read the
good ones; the whole command is parsed too, for the controller's own verdict. A fixed command
keeps the default flags, the user's values for them and the user's additions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.doctor.static_checks_context import ChartValues, describe, to_yaml, truthy
from tensorfusion.domain.settings.controller_flags import (
    FLAGS,
    ControllerFlags,
    FlagError,
    FlagSpec,
    parse_controller_flags,
)

__all__ = [
    "PLACEHOLDER_ADDRESS",
    "Command",
    "FlagGroup",
    "command_snippet",
    "completed_command",
    "read_command",
    "repaired_command",
]

PLACEHOLDER_ADDRESS: Final = "http://<alertmanager-service>.<namespace>.svc.cluster.local:9093"

_SPECS: Final[Mapping[str, FlagSpec]] = {spec.name: spec for spec in FLAGS}


@dataclass(frozen=True, slots=True)
class FlagGroup:
    """One flag as written (`-leader-elect`, `-alert-manager-addr URL`) and the parser's verdict
    on it alone: the flags it sets, or the parser's message."""

    name: str
    tokens: tuple[str, ...]
    flags: ControllerFlags | None
    error: str


@dataclass(frozen=True, slots=True)
class Command:
    """A `controller.command` value: the program, its flags, and what is wrong with it."""

    program: tuple[str, ...]
    groups: tuple[FlagGroup, ...]
    flags: ControllerFlags | None
    """The whole command as the controller parses it; None when it refuses to start."""
    error: str
    """The controller's message when it refuses the command."""
    problems: tuple[str, ...]
    """Items Kubernetes refuses (not strings), or a value that is not a list."""

    def given(self) -> list[str]:
        """Names of the flags the parser accepts, in order, each once."""
        return list(dict.fromkeys(g.name for g in self.groups if g.name and not g.error))

    def group(self, name: str) -> FlagGroup | None:
        """The last occurrence of a flag (the parser keeps the last value)."""
        found = [g for g in self.groups if g.name == name]
        return found[-1] if found else None

    def errors(self) -> list[str]:
        """The parser's messages, one per refused flag (or for the whole command)."""
        messages = [g.error for g in self.groups if g.error]
        if self.error and not messages:
            messages.append(self.error)
        return messages


def read_command(value: Any, where: str = "controller.command") -> Command:
    """Split and parse a command value (a list of strings; None is the image's entrypoint)."""
    problems: list[str] = []
    if value is None:
        raw: list[Any] = []
    elif isinstance(value, list):
        raw = value
    else:
        problems.append(f"{where} is {describe(value)}, not a list of strings")
        raw = []
    items: list[str] = []
    for index, item in enumerate(raw):
        if not isinstance(item, str):
            problems.append(
                f"{where}[{index}] is {describe(item)}, not a string: Kubernetes rejects the "
                "Deployment (quote it)"
            )
        items.append(item if isinstance(item, str) else describe(item))
    program: tuple[str, ...] = ()
    rest = items
    if items and not items[0].startswith("-") and _parse(items[:1])[1] == "":
        program, rest = (items[0],), items[1:]
    flags, error = _parse(items)
    return Command(program, tuple(_groups(rest)), flags, error, tuple(problems))


def completed_command(
    user: Command, default: Command, replace: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """The default command with the user's values for its flags, then the user's other
    accepted flags; `replace` (flag name → tokens) wins over both and is added if missing."""
    replace = replace or {}
    accepted = {g.name: g for g in user.groups if g.name and not g.error}
    command = list(user.program or default.program)
    emitted: set[str] = set()
    for group in default.groups:
        if not group.name or group.name in emitted:
            continue
        source = accepted.get(group.name, group)
        command.extend(replace.get(group.name, source.tokens))
        emitted.add(group.name)
    for name, group in accepted.items():
        if name not in emitted:
            command.extend(replace.get(name, group.tokens))
            emitted.add(name)
    for name, tokens in replace.items():
        if name not in emitted:
            command.extend(tokens)
    return command


def repaired_command(chart: ChartValues) -> list[str]:
    """The command every command check passes with: the default flags (`-leader-elect` on),
    the user's values and additions the parser accepts, and an `-alert-manager-addr` with a
    scheme (a placeholder when the chart's Alertmanager is off and none is given)."""
    command = read_command(chart.get("controller.command"))
    replace: dict[str, Sequence[str]] = {"leader-elect": ["-leader-elect"]}
    group = command.group("alert-manager-addr")
    if group is not None:
        replace["alert-manager-addr"] = _with_scheme(group.tokens)
    elif not truthy(chart.get("alert.enabled")):
        replace["alert-manager-addr"] = ["-alert-manager-addr", PLACEHOLDER_ADDRESS]
    return completed_command(command, read_command(chart.default("controller.command")), replace)


def _with_scheme(tokens: Sequence[str]) -> list[str]:
    """`-alert-manager-addr` with `http://` added to each address that lacks a scheme."""
    value = tokens[-1] if len(tokens) > 1 else tokens[0].partition("=")[2]
    addresses = [part.strip() for part in value.split(",") if part.strip()]
    fixed = [a if "://" in a else f"http://{a}" for a in addresses] or [PLACEHOLDER_ADDRESS]
    return ["-alert-manager-addr", ",".join(fixed)]


def command_snippet(command: Sequence[str]) -> str:
    """The values snippet that sets the whole command."""
    return to_yaml({"controller": {"command": list(command)}})


def _parse(args: Sequence[str]) -> tuple[ControllerFlags | None, str]:
    try:
        return parse_controller_flags(args), ""
    except FlagError as error:
        return None, str(error)


def _groups(args: Sequence[str]) -> list[FlagGroup]:
    """Flags with their values, split as the parser reads them."""
    groups: list[FlagGroup] = []
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        tokens = [arg]
        name = ""
        if arg == "--":
            tokens.extend(args[position:])
            position = len(args)
        elif arg.startswith("-") and arg != "-":
            name, has_value, _ = arg.lstrip("-").partition("=")
            spec = _SPECS.get(name)
            takes_value = spec is not None and not spec.boolean and not has_value
            if takes_value and position < len(args):
                tokens.append(args[position])
                position += 1
        flags, error = _parse(tokens)
        groups.append(FlagGroup(name, tuple(tokens), flags, error))
    return groups
