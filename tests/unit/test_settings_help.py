"""`tensor-fusion controller --help` and `hypervisor --help` list every flag and variable of the
settings tables, with the defaults the parsers give."""

from __future__ import annotations

from dataclasses import fields

import pytest
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.domain.settings.controller_environment import (
    CONTROLLER_VARIABLES,
    ControllerEnvironment,
    TsdbEnvironment,
)
from tensorfusion.domain.settings.controller_flags import (
    FLAGS,
    ControllerFlags,
    FlagError,
    FlagSpec,
    parse_controller_flags,
)
from tensorfusion.domain.settings.controller_settings import ControllerSettings
from tensorfusion.domain.settings.hypervisor_environment import (
    HYPERVISOR_VARIABLES,
    HypervisorEnvironment,
)
from tensorfusion.domain.settings.hypervisor_settings import (
    HYPERVISOR_FLAGS,
    HypervisorFlags,
    HypervisorSettings,
)
from tensorfusion.domain.settings.usage import flag_default, format_default, variable_default
from tensorfusion.domain.settings.variables import Variable, attribute_value


def _help(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _flag_entry(spec: FlagSpec, defaults: object) -> str:
    value = "" if spec.boolean else f" {spec.value}"
    return f"-{spec.name}{value} (default {flag_default(spec, defaults)})"


def _variable_entry(variable: Variable, defaults: object) -> str:
    return f"{variable.name} {variable.type} (default {variable_default(variable, defaults)})"


def test_controller_help_lists_every_flag_and_variable_with_the_parsed_default() -> None:
    text = _help("controller")
    parsed = ControllerSettings.read([], {})
    for spec in FLAGS:
        assert _flag_entry(spec, parsed.flags) in text, spec.name
    for variable in CONTROLLER_VARIABLES:
        assert _variable_entry(variable, parsed.env) in text, variable.name
    assert '-metrics-bind-address address (default "0")' in text
    assert "PORT port (default 8080)" in text


def test_hypervisor_help_lists_every_flag_and_variable_with_the_parsed_default() -> None:
    text = _help("hypervisor")
    parsed = HypervisorSettings.read([], {"GPU_NODE_NAME": "n"})
    for spec in HYPERVISOR_FLAGS:
        assert _flag_entry(spec, parsed.flags) in text, spec.name
    for variable in HYPERVISOR_VARIABLES:
        if variable.name != "GPU_NODE_NAME":
            assert _variable_entry(variable, parsed.env) in text, variable.name
    assert "GPU_NODE_NAME name (default none: required)" in text
    assert "TF_DISCOVERY_INTERVAL duration (default 600s)" in text


def test_the_documented_defaults_are_the_parsed_ones() -> None:
    assert ControllerSettings.read([], {}) == ControllerSettings()
    assert ControllerEnvironment.from_mapping({}) == ControllerEnvironment()
    assert parse_controller_flags([]) == ControllerFlags()
    assert HypervisorSettings.read([], {"GPU_NODE_NAME": "n"}) == HypervisorSettings(
        HypervisorFlags(), HypervisorEnvironment(node="n")
    )
    env = ControllerEnvironment.from_mapping({"TF_RELEASE_FULLNAME": "tf"})
    assert env.service_account == "tf"  # SERVICE_ACCOUNT_NAME's documented fallback


@pytest.mark.parametrize(
    ("settings", "table", "skipped"),
    [
        (ControllerFlags, [s.attribute for s in FLAGS], {"given", "notices"}),
        (ControllerEnvironment, [v.attribute for v in CONTROLLER_VARIABLES
                                 if "." not in v.attribute], {"tsdb"}),
        (TsdbEnvironment, [v.attribute.removeprefix("tsdb.") for v in CONTROLLER_VARIABLES
                           if v.attribute.startswith("tsdb.")], set()),
        (HypervisorEnvironment, [v.attribute for v in HYPERVISOR_VARIABLES], {"warnings"}),
        (HypervisorFlags, [s.attribute for s in HYPERVISOR_FLAGS], set()),
    ],
)  # fmt: skip
def test_every_setting_has_one_row_in_its_table(
    settings: type, table: list[str | None], skipped: set[str]
) -> None:
    names = [f.name for f in fields(settings) if f.name not in skipped]
    rows = [attribute for attribute in table if attribute is not None]
    assert sorted(rows) == sorted(names)


def test_every_variable_is_read_from_its_name() -> None:
    samples = {"port": "1234", "static|dynamic": "dynamic", "list": "a,b"}
    for variable in CONTROLLER_VARIABLES:
        default = attribute_value(ControllerEnvironment(), variable.attribute)
        flipped = "false" if default is True else "true"
        value = flipped if variable.type == "bool" else samples.get(variable.type, "given")
        read = ControllerEnvironment.from_mapping({variable.name: value})
        assert attribute_value(read, variable.attribute) != attribute_value(
            ControllerEnvironment(), variable.attribute
        ), variable.name


def test_format_default() -> None:
    values: tuple[object, ...] = (True, 8080, "x", ("a", "b"), {})
    assert [format_default(v) for v in values] == [
        "true", "8080", '"x"', '"a,b"', '""',
    ]  # fmt: skip
    assert format_default(600.0, "duration") == "600s"


def test_hypervisor_flags_one_or_two_dashes() -> None:
    settings = HypervisorSettings.read(
        ["--kubeconfig=/k", "-discovery-interval", "5m", "--log-format", "json"],
        {"GPU_NODE_NAME": "n", "TF_DISCOVERY_INTERVAL": "1m"},
    )
    assert settings.flags == HypervisorFlags(kubeconfig="/k", discovery_interval_s=300.0,
                                             log_format="json")  # fmt: skip
    assert settings.discovery_interval_s == 300.0
    assert HypervisorSettings.read([], {"GPU_NODE_NAME": "n", "TF_DISCOVERY_INTERVAL": "1m"}
                                   ).discovery_interval_s == 60.0  # fmt: skip
    with pytest.raises(FlagError, match='-log-format: invalid value "xml"'):
        HypervisorSettings.read(["--log-format", "xml"], {"GPU_NODE_NAME": "n"})
    with pytest.raises(FlagError, match="unknown flag -kube; valid flags: -discovery-interval"):
        HypervisorSettings.read(["--kube", "x"], {"GPU_NODE_NAME": "n"})
