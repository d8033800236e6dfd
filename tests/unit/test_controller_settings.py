"""The controller's flags (as `controller.command` writes them) and environment."""

from __future__ import annotations

import pytest

from tensorfusion.domain.settings.controller_environment import (
    ControllerEnvironment,
    EnvironmentValueError,
)
from tensorfusion.domain.settings.controller_flags import (
    ControllerFlags,
    FlagError,
    PortRange,
    parse_controller_flags,
)
from tensorfusion.domain.vocabulary import IsolationPolicy

CHART_COMMAND = [
    "/manager", "-metrics-bind-address", ":9000", "-leader-elect", "-enable-auto-scale",
    "-enable-alert", "-enable-auto-expander",
]  # fmt: skip


def test_the_charts_default_command_parses() -> None:
    flags = parse_controller_flags(CHART_COMMAND)
    assert flags.metrics_bind_address == ":9000" and flags.metrics_enabled
    assert flags.leader_elect and flags.enable_alert
    assert flags.given == {
        "metrics-bind-address", "leader-elect", "enable-auto-scale", "enable-alert",
        "enable-auto-expander",
    }  # fmt: skip
    assert flags.notices == (
        "-enable-auto-expander: accepted; no effect in this version: there is no node expander",
    )


def test_defaults_without_flags() -> None:
    flags = parse_controller_flags([])
    assert flags == ControllerFlags()
    assert not flags.metrics_enabled and not flags.leader_elect
    assert flags.health_probe_bind_address == ":8081"
    assert flags.scheduler_extender_bind_address == "127.0.0.1:8082"
    assert flags.host_port_range == PortRange(40000, 42000)


@pytest.mark.parametrize(
    "argv",
    [
        ["--alert-manager-addr=http://a:9093,https://b:9093", "--leader-elect=false"],
        ["-alert-manager-addr", "http://a:9093, https://b:9093", "-leader-elect=0"],
    ],
)
def test_one_or_two_dashes_and_both_value_forms(argv: list[str]) -> None:
    flags = parse_controller_flags(argv)
    assert flags.alert_manager_addr == ("http://a:9093", "https://b:9093")
    assert not flags.leader_elect


def test_logging_flags_are_accepted_and_metrics_path_is_noticed() -> None:
    flags = parse_controller_flags(
        ["-v=2", "-zap-devel", "-zap-log-level", "debug", "-metrics-path", "/tmp/m"]
    )
    assert flags.log_level == "debug"
    assert flags.notices == (
        "-metrics-path: accepted and ignored: there is no metrics file any more",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-leader-elekt"], "unknown flag -leader-elekt; valid flags: -agent-readiness, "),
        (["-agent-readiness", "kubelet"], '-agent-readiness: invalid value "kubelet": must be '
                                          "one of pod, heartbeat"),
        (["-leader-elect=yes"], '-leader-elect: invalid value "yes": a boolean flag takes true'),
        (["-metrics-bind-address"], "-metrics-bind-address: the flag needs a value"),
        (["-metrics-bind-address", "9000"], '-metrics-bind-address: invalid value "9000": must '
                                            "be host:port or :port"),
        (["-alert-manager-addr", "alertmanager:9093"], '-alert-manager-addr: invalid value '
                                                       '"alertmanager:9093": must be a URL'),
        (["-scheduler-extender-bind-address", "0.0.0.0:8082"],
         '-scheduler-extender-bind-address: invalid value "0.0.0.0:8082": must be a loopback'),
        (["-host-port-range", "42000-40000"], '-host-port-range: invalid value "42000-40000"'),
        (["stray"], 'unexpected argument "stray": the controller takes flags only'),
        (["-metrics-secure"], "-metrics-secure: not supported in this version: /metrics is "
                              "served over plain HTTP"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as error:
        parse_controller_flags(argv)
    assert str(error.value).startswith(message)


def test_metrics_secure_false_is_accepted() -> None:
    assert not parse_controller_flags(["-metrics-secure=false"]).metrics_secure


def test_loopback_extender_addresses_are_accepted() -> None:
    for address in ("127.0.0.1:8082", "localhost:9999", "[::1]:8082", "127.0.0.5:1"):
        assert (
            parse_controller_flags(
                ["-scheduler-extender-bind-address", address]
            ).scheduler_extender_bind_address
            == address
        )


def test_the_environment_as_the_chart_sets_it() -> None:
    env = ControllerEnvironment.from_mapping({
        "TF_RELEASE_FULLNAME": "tf", "POD_NAME": "tf-controller-0", "POD_IP": "10.0.0.7",
        "OPERATOR_NAMESPACE": "tensor-fusion-sys", "TF_ISOLATION_MODE_POLICY": "dynamic",
        "TSDB_MYSQL_HOST": "greptimedb", "TSDB_MYSQL_PORT": "4002", "TSDB_IS_CLOUD": "false",
        "NVIDIA_OPERATOR_PROGRESSIVE_MIGRATION": "true", "ENABLE_WEBHOOKS": "false",
    })  # fmt: skip
    assert (env.release_fullname, env.pod_name, env.pod_ip) == ("tf", "tf-controller-0", "10.0.0.7")
    assert env.isolation_policy is IsolationPolicy.DYNAMIC
    assert env.tsdb.greptime and env.tsdb.mysql_port == 4002
    assert env.progressive_migration and not env.enable_webhooks and env.enable_scheduler
    assert env.gpu_node_selector == "nvidia.com/gpu.present=true"


def test_out_of_a_pod_the_environment_has_defaults() -> None:
    env = ControllerEnvironment.from_mapping({})
    assert env.isolation_policy is IsolationPolicy.STATIC and not env.tsdb.greptime
    assert env.namespace == "tensor-fusion-sys"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TF_ISOLATION_MODE_POLICY", "strict", "must be static or dynamic"),
        ("TSDB_MYSQL_PORT", "99999", "must be a port 1..65535"),
        ("ENABLE_WEBHOOKS", "maybe", "must be true or false"),
    ],
)
def test_a_bad_environment_value_names_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(EnvironmentValueError) as error:
        ControllerEnvironment.from_mapping({name: value})
    assert str(error.value) == f'{name}: invalid value "{value}": {message}'


def test_the_public_api_is_on_loopback_and_peers_have_a_port_of_their_own() -> None:
    default = ControllerEnvironment.from_mapping({})
    assert (default.api_host, default.peer_host, default.peer_port) == ("127.0.0.1", "", 9444)
    assert default.peer_token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    given = {"API_BIND_HOST": "", "PEER_BIND_HOST": "10.0.0.7", "PEER_PORT": "8443",
             "PEER_TOKEN_FILE": "/t"}  # fmt: skip
    set_ = ControllerEnvironment.from_mapping(given)
    assert (set_.api_host, set_.peer_host, set_.peer_port, set_.peer_token_file) == (
        "", "10.0.0.7", 8443, "/t")  # fmt: skip
