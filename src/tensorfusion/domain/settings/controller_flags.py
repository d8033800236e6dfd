"""The controller's command-line flags as `controller.command` writes them (deployment.md §3.1).

Go `flag` style: one or two dashes, `-flag value` or `-flag=value`, boolean flags bare or
`=true|false`. The logging flags of controller-runtime are accepted; any other unknown flag or
an invalid value is one `FlagError` that names the flag, the value and what is allowed (the
list of valid flags for an unknown one). The controller and `tensor-fusion doctor` parse the
same way with this module.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

__all__ = [
    "FLAGS",
    "ControllerFlags",
    "FlagError",
    "FlagSpec",
    "PortRange",
    "parse_controller_flags",
    "parse_flags",
]

DEFAULT_CONFIG_DIR: Final = "/etc/tensor-fusion/config"
_URL: Final = re.compile(r"https?://(?:\[[0-9A-Fa-f:.]+\]|[^/:\s\[\]]+)(?::[0-9]{1,5})?(?:/\S*)?")
_TRUE: Final = frozenset({"true", "1", "t", "True", "TRUE", "T"})
_FALSE: Final = frozenset({"false", "0", "f", "False", "FALSE", "F"})


class FlagError(ValueError):
    """A flag the controller cannot start with; the message says what is allowed."""


@dataclass(frozen=True, slots=True)
class PortRange:
    """An inclusive range of ports, written `first-last`."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass(frozen=True, slots=True)
class ControllerFlags:
    """Every flag of the controller with its default when the flag is absent."""

    metrics_bind_address: str = "0"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    enable_auto_scale: bool = False
    enable_auto_expander: bool = False
    enable_alert: bool = False
    alert_manager_addr: tuple[str, ...] = ()
    dynamic_config: str = f"{DEFAULT_CONFIG_DIR}/config.yaml"
    scheduler_config: str = f"{DEFAULT_CONFIG_DIR}/scheduler-config.yaml"
    kube_scheduler_path: str = "/usr/local/bin/kube-scheduler"
    scheduler_extender_bind_address: str = "127.0.0.1:8082"
    agent_readiness: Literal["pod", "heartbeat"] = "pod"
    gpu_info_config: str = "/etc/tensor-fusion/gpu-info/gpu-info.yaml"
    metrics_secure: bool = False
    enable_http2: bool = False
    host_port_range: PortRange = PortRange(40000, 42000)
    cluster_host_port_range: PortRange = PortRange(42000, 62000)
    compatible_with_nvidia_container_toolkit: bool = False
    kubeconfig: str | None = None
    log_format: Literal["text", "json"] = "text"
    log_level: str = "info"
    given: frozenset[str] = field(default_factory=frozenset)
    """Flags present on the command line (by name, without dashes)."""
    notices: tuple[str, ...] = ()
    """Flags accepted with no effect in this version, to be logged once at start."""

    @property
    def metrics_enabled(self) -> bool:
        """Whether `/metrics` is served (`-metrics-bind-address 0` turns it off)."""
        return self.metrics_bind_address != "0"


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """One flag: its attribute, whether it is boolean, how its value is read, and its help (the
    default is the `ControllerFlags` field's)."""

    name: str
    attribute: str | None
    boolean: bool
    read: Callable[[str, str], Any] | None = None
    notice: str | None = None
    help: str = ""
    value: str = "string"
    """The value's type as the help shows it."""
    default_text: str | None = None
    """The default as the help shows it, for a flag with no field (or a None default)."""


def _address(flag: str, value: str) -> str:
    """`host:port` or `:port`, port 0..65535."""
    host, separator, port = value.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise FlagError(
            f'-{flag}: invalid value "{value}": must be host:port or :port '
            "(port 0..65535), e.g. :9000"
        )
    del host
    return value


def _metrics_address(flag: str, value: str) -> str:
    return value if value == "0" else _address(flag, value)


def _loopback_address(flag: str, value: str) -> str:
    _address(flag, value)
    host = value.rpartition(":")[0].strip("[]")
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise FlagError(
            f'-{flag}: invalid value "{value}": must be a loopback address such as '
            "127.0.0.1:8082 (the extender is served to the leader's own kube-scheduler only)"
        )
    return value


def _urls(flag: str, value: str) -> tuple[str, ...]:
    urls = tuple(part.strip() for part in value.split(",") if part.strip())
    if not urls:
        raise FlagError(f'-{flag}: invalid value "{value}": give one URL or a comma list')
    for url in urls:
        if not _URL.fullmatch(url):
            raise FlagError(
                f'-{flag}: invalid value "{url}": must be a URL with its scheme, e.g. '
                "http://alertmanager:9093"
            )
    return urls


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def read(flag: str, value: str) -> str:
        if value not in allowed:
            raise FlagError(
                f'-{flag}: invalid value "{value}": must be one of {", ".join(allowed)}'
            )
        return value

    return read


def _path(flag: str, value: str) -> str:
    if not value:
        raise FlagError(f'-{flag}: invalid value "": must be a file path')
    return value


def _port_range(flag: str, value: str) -> PortRange:
    first, separator, last = value.partition("-")
    if separator and first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last) <= 65535:
        return PortRange(int(first), int(last))
    raise FlagError(
        f'-{flag}: invalid value "{value}": must be first-last with 1 <= first <= last <= 65535'
    )


def _any(flag: str, value: str) -> str:
    return value


_NO_EFFECT: Final = "accepted; no effect in this version: there is no {what}"
METRICS_SECURE_REFUSED: Final = (
    "-metrics-secure: not supported in this version: /metrics is served over plain HTTP "
    "without authentication; leave the flag out and limit who reaches -metrics-bind-address "
    "(docs/security.md), or turn /metrics off with -metrics-bind-address 0"
)
"""Refused rather than accepted and ignored: an operator who asks for it must not believe it
is on."""

FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("metrics-bind-address", "metrics_bind_address", False, _metrics_address,
             value="address",
             help="Where /metrics is served (host:port or :port); 0 turns it off."),
    FlagSpec("health-probe-bind-address", "health_probe_bind_address", False, _address,
             value="address", help="Where /healthz and /readyz are served."),
    FlagSpec("leader-elect", "leader_elect", True,
             help="Campaign for the Lease; only the leader runs the leader-only work. Without "
                  "it this replica leads alone."),
    FlagSpec("enable-auto-scale", "enable_auto_scale", True,
             help="Run the autoscaler on the leader: right-size workloads whose "
                  "autoScalingConfig enables it (docs/autoscaling.md)."),
    FlagSpec("enable-auto-expander", "enable_auto_expander", True,
             notice=_NO_EFFECT.format(what="node expander"),
             help="Accepted; no effect in this version (there is no node expander)."),
    FlagSpec("enable-alert", "enable_alert", True,
             help="Evaluate the alert rules of the dynamic config on the leader."),
    FlagSpec("alert-manager-addr", "alert_manager_addr", False, _urls, value="urls",
             help="Alertmanager URLs (comma list) alerts are sent to; empty: the release's "
                  "Alertmanagers are discovered."),
    FlagSpec("dynamic-config", "dynamic_config", False, _path, value="path",
             help="The hot-reloaded config.yaml (alert rules, crash guard, metric labels)."),
    FlagSpec("scheduler-config", "scheduler_config", False, _path, value="path",
             help="The kube-scheduler configuration; out of a pod, when the default file is "
                  "absent, the chart's default."),
    FlagSpec("kube-scheduler-path", "kube_scheduler_path", False, _path, value="path",
             help="The kube-scheduler binary the leader runs with the extender."),
    FlagSpec("scheduler-extender-bind-address", "scheduler_extender_bind_address", False,
             _loopback_address, value="address",
             help="The loopback address of the scheduler extender (for the leader's own "
                  "kube-scheduler)."),
    FlagSpec("agent-readiness", "agent_readiness", False, _choice("pod", "heartbeat"),
             value="pod|heartbeat",
             help="When a node agent counts as ready: its pod Ready, or a heartbeat newer "
                  "than its pod."),
    FlagSpec("gpu-info-config", "gpu_info_config", False, _path, value="path",
             help="Accepted; the GPU catalogue is built in."),
    FlagSpec("metrics-secure", "metrics_secure", True,
             help="Refused when true: /metrics is plain HTTP in this version."),
    FlagSpec("enable-http2", "enable_http2", True, help="Accepted; no effect in this version."),
    FlagSpec("host-port-range", "host_port_range", False, _port_range, value="first-last",
             help="Accepted; no effect in this version."),
    FlagSpec("cluster-host-port-range", "cluster_host_port_range", False, _port_range,
             value="first-last", help="Accepted; no effect in this version."),
    FlagSpec("compatible-with-nvidia-container-toolkit",
             "compatible_with_nvidia_container_toolkit", True,
             help="Accepted; no effect in this version."),
    FlagSpec("kubeconfig", "kubeconfig", False, _path, value="path",
             default_text='"" (the in-cluster configuration)',
             help="The kubeconfig file, out of a pod."),
    FlagSpec("log-format", "log_format", False, _choice("text", "json"), value="text|json",
             help="Log lines as text or one JSON object per line."),
    FlagSpec("zap-log-level", "log_level", False, _choice("debug", "info", "error"),
             value="debug|info|error", help="The log level."),
    FlagSpec("zap-devel", None, True, default_text="false",
             help="Accepted (controller-runtime's logging flag); no effect."),
    FlagSpec("v", None, False, _any, value="level", default_text='""',
             help="Accepted (klog's verbosity); no effect."),
    FlagSpec("metrics-path", None, False, _any, value="path", default_text='""',
             notice="accepted and ignored: there is no metrics file any more",
             help="Accepted and ignored: there is no metrics file any more."),
)  # fmt: skip


def _boolean(flag: str, value: str) -> bool:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise FlagError(f'-{flag}: invalid value "{value}": a boolean flag takes true or false')


def _unknown(flag: str, specs: Sequence[FlagSpec]) -> FlagError:
    valid = ", ".join(f"-{spec.name}" for spec in sorted(specs, key=lambda s: s.name))
    return FlagError(f"unknown flag -{flag}; valid flags: {valid}")


def parse_controller_flags(argv: Sequence[str]) -> ControllerFlags:
    """Read a command line (with or without the leading `/manager`) into the controller's flags."""
    args = list(argv)
    if args and not args[0].startswith("-") and args[0].rsplit("/", 1)[-1] == "manager":
        args = args[1:]
    values, given, notices = parse_flags(args, FLAGS, "the controller")
    if values.get("metrics_secure"):
        raise FlagError(METRICS_SECURE_REFUSED)
    known = {f.name for f in fields(ControllerFlags)}
    assert set(values) <= known
    return ControllerFlags(**values, given=frozenset(given), notices=notices)


def parse_flags(
    args: Sequence[str], specs: Sequence[FlagSpec], program: str
) -> tuple[dict[str, Any], frozenset[str], tuple[str, ...]]:
    """Go-style flags of the table `specs`: the values by attribute, the flags given (by
    name) and the notices of flags accepted with no effect; FlagError names a bad one."""
    by_name = {spec.name: spec for spec in specs}
    values: dict[str, Any] = {}
    given: set[str] = set()
    notices: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if arg == "--":
            if position < len(args):
                raise FlagError(
                    f'unexpected argument "{args[position]}": {program} takes flags only'
                )
            break
        if not arg.startswith("-") or arg in ("-", "---") or arg.startswith("---"):
            raise FlagError(f'unexpected argument "{arg}": {program} takes flags only')
        name, has_value, value = arg.lstrip("-").partition("=")
        spec = by_name.get(name)
        if spec is None:
            raise _unknown(name, specs)
        if spec.boolean:
            parsed: Any = _boolean(name, value) if has_value else True
        else:
            if not has_value:
                if position >= len(args):
                    raise FlagError(f"-{name}: the flag needs a value")
                value = args[position]
                position += 1
            assert spec.read is not None
            parsed = spec.read(name, value)
        given.add(name)
        if spec.notice is not None and parsed is not False:
            notices.append(f"-{name}: {spec.notice}")
        if spec.attribute is not None:
            values[spec.attribute] = parsed
    return values, frozenset(given), tuple(dict.fromkeys(notices))
