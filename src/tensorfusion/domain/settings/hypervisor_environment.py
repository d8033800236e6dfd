"""The node agent's environment as the controller renders its pod (deployment.md §9, §10 step 2),
the one settings object of `tensor-fusion hypervisor`.

The caller passes the process environment as a mapping; nothing here reads it. A bad value is
one `EnvironmentValueError` naming the variable, the value and what is allowed, except
`TF_LOG_LEVEL`, which falls back to `info` with a warning (§9.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.metrics.extra_tags import parse_extra_labels
from tensorfusion.domain.metrics.schema import DEFAULT_AGENT_SAMPLE_INTERVAL_S
from tensorfusion.domain.settings.environment_values import EnvironmentValueError
from tensorfusion.domain.settings.variables import (
    Reader,
    Variable,
    Warned,
    read_boolean,
    read_isolation_policy,
    read_port,
    read_raw,
    read_variables,
)
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

__all__ = ["HYPERVISOR_VARIABLES", "LOG_LEVELS", "HypervisorEnvironment"]

LOG_LEVELS: Final = ("debug", "info", "warn", "error")
DEFAULT_PORT: Final = 8000
DEFAULT_METRICS_INTERVAL_S: Final = DEFAULT_AGENT_SAMPLE_INTERVAL_S
MIN_METRICS_INTERVAL_S: Final = 1.0
DEFAULT_DISCOVERY_INTERVAL_S: Final = 600.0
HEARTBEAT_INTERVAL_S: Final = 30.0


def _seconds(minimum: float) -> Reader:
    """A Go duration (`10s`, `1m`) of at least `minimum` seconds, as seconds."""

    def read(env: Mapping[str, str], name: str, default: Any) -> Any:
        text = env.get(name, "").strip()
        if not text:
            return default
        try:
            seconds = parse_go_duration(text) / 1e9
        except DurationError:
            raise EnvironmentValueError(
                f'{name}: invalid value "{text}": must be a duration such as 10s or 1m'
            ) from None
        if seconds < minimum:
            raise EnvironmentValueError(
                f'{name}: invalid value "{text}": must be at least {minimum:g}s'
            )
        return seconds

    return read


def _node(env: Mapping[str, str], name: str, default: Any) -> Any:
    node = env.get(name, "").strip()
    if not node:
        raise EnvironmentValueError(f"{name}: not set: must name the node this agent serves")
    return node


def _log_level(env: Mapping[str, str], name: str, default: Any) -> Any:
    level = env.get(name, "").strip().lower() or default
    if level == "warning":
        level = "warn"
    if level not in LOG_LEVELS:
        return Warned(default, (
            f'{name}: invalid value "{env.get(name)}": must be one of '
            f"{', '.join(LOG_LEVELS)}; using {default}",
        ))  # fmt: skip
    return level


def _extra_labels(env: Mapping[str, str], name: str, default: Any) -> Any:
    labels, warnings = parse_extra_labels(env.get(name, ""), name)
    return Warned(labels, tuple(warnings))


def _choice(choices: Mapping[str, Any]) -> Reader:
    """One of `choices` (any case) as its value."""

    def read(env: Mapping[str, str], name: str, default: Any) -> Any:
        text = env.get(name, "").strip().lower()
        if not text:
            return default
        if text not in choices:
            raise EnvironmentValueError(
                f'{name}: invalid value "{env.get(name)}": must be one of {", ".join(choices)}'
            )
        return choices[text]

    return read


MPS_CHOICES: Final = ("auto", "on", "off")
DEFAULT_MPS_DIR: Final = "/run/tensor-fusion/mps"
DEFAULT_SHM_DIR: Final = "/run/tensor-fusion/shm"


HYPERVISOR_VARIABLES: Final[tuple[Variable, ...]] = (
    Variable("GPU_NODE_NAME", "node", "name", "The node (and GPUNode) this agent serves.",
             _node, default_text="none: required"),
    Variable("POD_NAME", "pod_name", "name", "This agent's pod."),
    Variable("TENSOR_FUSION_POOL_NAME", "pool", "name", "The node's GPUPool."),
    Variable("HYPERVISOR_PORT", "port", "port",
             "/healthz, /readyz and POST /api/v1/devices/discover.", read_port),
    Variable("HYPERVISOR_BIND_HOST", "bind_host", "host",
             "The address to listen on; empty for every interface."),
    Variable("DETECT_IN_USED_GPUS", "detect_in_used_gpus", "bool",
             "Watch which GPUs another device plugin's pods use.", read_boolean),
    Variable("TF_ISOLATION_MODE_POLICY", "isolation_policy", "static|dynamic",
             "The pool's isolation policy.", read_isolation_policy),
    Variable("TF_ISOLATION_MODE", "isolation_mode", "|".join(m.value for m in IsolationMode),
             "The pool's isolation mode.", _choice({m.value: m for m in IsolationMode})),
    Variable("TF_PROVIDER_HARDWARE_METADATA", "hardware_metadata", "json|yaml",
             "The ProviderConfig's hardwareMetadata."),
    Variable("TF_KUBELET_DEVICE_PLUGIN", "device_plugin", "bool",
             "Register the index resources with the kubelet; false where there is none.",
             read_boolean),
    Variable("TF_LOG_LEVEL", "log_level", "|".join(LOG_LEVELS),
             "The log level; a bad one is a warning and info.", _log_level),
    Variable("TF_METRICS_INTERVAL", "metrics_interval_s", "duration",
             f"How often usage is sampled and written (at least {MIN_METRICS_INTERVAL_S:g}s).",
             _seconds(MIN_METRICS_INTERVAL_S)),
    Variable("TF_DISCOVERY_INTERVAL", "discovery_interval_s", "duration",
             "How often devices are discovered (--discovery-interval overrides it).",
             _seconds(1.0)),
    Variable("TF_HEARTBEAT_INTERVAL", "heartbeat_interval_s", "duration",
             "How often the GPUNode's heartbeat is written.", _seconds(1.0)),
    Variable("TF_METRICS_WRITE_URL", "metrics_write_url", "url",
             "Where usage and log rows are written; empty: not written."),
    Variable("TF_METRICS_WRITE_DB", "metrics_write_db", "name", "The metrics database."),
    Variable("TF_METRICS_WRITE_USER", "metrics_write_user", "name", "The write user.", read_raw),
    Variable("TF_METRICS_WRITE_PASSWORD", "metrics_write_password", "secret",
             "The write password.", read_raw),
    Variable("TF_METRICS_WRITE_TOKEN_FILE", "metrics_write_token_file", "path",
             "The bearer token sent with metric writes; empty: none."),
    Variable("TF_METRICS_WRITE_CA_FILE", "metrics_write_ca_file", "path",
             "The CA of an HTTPS write URL; empty: the system's CAs."),
    Variable("TF_SIMULATED_GPUS", "simulated_gpus", "path",
             "A simulated provider file (tests, demos); empty: NVML."),
    Variable("TF_HYPERVISOR_METRICS_EXTRA_LABELS", "metrics_extra_labels", "json",
             "metricsExtraPodLabels for tf_worker_usage.", _extra_labels),
    Variable("TF_MPS", "mps", "|".join(MPS_CHOICES),
             "Run the MPS control daemon that enforces workers' limits (auto: with NVML when "
             "the isolation mode needs it).", _choice({c: c for c in MPS_CHOICES})),
    Variable("TF_MPS_CONTROL", "mps_control", "path",
             "The nvidia-cuda-mps-control binary (a name is looked up on PATH)."),
    Variable("TF_MPS_DIR", "mps_dir", "path",
             "Host directory of the daemon's pipe/ and log/ (shared with the workers)."),
    Variable("TF_MPS_SHM_DIR", "mps_shm_dir", "path",
             "Host directory of the shared memory the workers get at /dev/shm."),
)  # fmt: skip
"""Every variable of the node agent, in the order they are read."""


@dataclass(frozen=True, slots=True)
class HypervisorEnvironment:
    """The variables the controller gives a node agent, with their defaults out of a pod."""

    node: str
    """`GPU_NODE_NAME`: the node (and GPUNode) this agent serves; required."""
    pod_name: str = ""
    pool: str = ""
    """`TENSOR_FUSION_POOL_NAME`: the node's GPUPool."""
    port: int = DEFAULT_PORT
    """`HYPERVISOR_PORT`: `/healthz`, `/readyz`, `POST /api/v1/devices/discover`."""
    bind_host: str = ""
    """`HYPERVISOR_BIND_HOST`: the address to listen on (all by default; agents sharing one
    host, as in the tests and `dev up`, each take a loopback address)."""
    detect_in_used_gpus: bool = False
    isolation_policy: IsolationPolicy = IsolationPolicy.STATIC
    isolation_mode: IsolationMode = IsolationMode.SOFT
    hardware_metadata: str = ""
    """`TF_PROVIDER_HARDWARE_METADATA`: the ProviderConfig's `hardwareMetadata` as JSON or
    YAML text (read by `domain.devices.tflops.parse_hardware_metadata`)."""
    device_plugin: bool = True
    """`TF_KUBELET_DEVICE_PLUGIN`: register the index resources with the kubelet; false where
    there is no kubelet (the test control plane, `dev up`): readiness then needs discovery only."""
    log_level: str = "info"
    metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S
    discovery_interval_s: float = DEFAULT_DISCOVERY_INTERVAL_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    metrics_write_url: str = ""
    metrics_write_db: str = ""
    metrics_write_user: str = ""
    metrics_write_password: str = field(default="", repr=False)
    metrics_write_token_file: str = ""
    """`TF_METRICS_WRITE_TOKEN_FILE`: the bearer token sent with metric writes (the embedded
    store checks it), read anew every metrics cycle; empty (the default): no token is sent.
    The controller sets it to the pod's ServiceAccount token only when the agents write to its
    embedded store, never for GreptimeDB. Out of a pod (tests, `dev up`), a file holding a
    token of the agent's ServiceAccount."""
    metrics_write_ca_file: str = ""
    """`TF_METRICS_WRITE_CA_FILE`: the CA that verifies an HTTPS write URL (the controller's
    peer port: its release CA, mounted from the webhook Secret's `ca.crt`), read anew every
    metrics cycle; empty: the system's CAs. A token is never sent to an `http://` URL."""
    simulated_gpus: str = ""
    """`TF_SIMULATED_GPUS`: a simulated provider file (tests, demos); empty means NVML."""
    metrics_extra_labels: Mapping[str, str] = field(default_factory=dict)
    """`TF_HYPERVISOR_METRICS_EXTRA_LABELS`: `metricsExtraPodLabels` for tf_worker_usage."""
    mps: str = "auto"
    """`TF_MPS`: `auto` runs the MPS control daemon with the NVML provider when the isolation
    mode needs it (`daemon_needed`), `on` with any provider (tests with the stand-in), `off`
    never (workers then run with no limit enforced on the GPU)."""
    mps_control: str = "nvidia-cuda-mps-control"
    """`TF_MPS_CONTROL`: the daemon's binary; a bare name is looked up on `PATH`."""
    mps_dir: str = DEFAULT_MPS_DIR
    """`TF_MPS_DIR`: the daemon's `pipe/` and `log/` directories live here (a host path the
    agent pod mounts at the same path; workers get them from the kubelet's Allocate)."""
    mps_shm_dir: str = DEFAULT_SHM_DIR
    """`TF_MPS_SHM_DIR`: the shared-memory tmpfs the agent pod's init container mounts; the
    daemon's servers and the workers share it as `/dev/shm`."""
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> HypervisorEnvironment:
        """Read the agent's variables (`HYPERVISOR_VARIABLES`) from an environment mapping."""
        values, warnings = read_variables(HYPERVISOR_VARIABLES, env, cls(node=""))
        return cls(**values, warnings=warnings)
