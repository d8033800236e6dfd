"""The node agent's environment as the controller renders its pod (deployment.md §9, §10 step 2),
the one settings object of `tensor-fusion hypervisor`.

The caller passes the process environment as a mapping; nothing here reads it. A bad value is
one `EnvironmentValueError` naming the variable, the value and what is allowed, except
`TF_LOG_LEVEL`, which falls back to `info` with a warning (§9.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tensorfusion.domain.durations import DurationError, parse_go_duration
from tensorfusion.domain.metrics.extra_tags import parse_extra_labels
from tensorfusion.domain.metrics.schema import DEFAULT_AGENT_SAMPLE_INTERVAL_S
from tensorfusion.domain.settings.environment_values import (
    EnvironmentValueError,
    env_bool,
    env_isolation_policy,
    env_port,
)
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy

__all__ = ["LOG_LEVELS", "HypervisorEnvironment"]

LOG_LEVELS: Final = ("debug", "info", "warn", "error")
DEFAULT_PORT: Final = 8000
DEFAULT_METRICS_INTERVAL_S: Final = DEFAULT_AGENT_SAMPLE_INTERVAL_S
MIN_METRICS_INTERVAL_S: Final = 1.0
DEFAULT_DISCOVERY_INTERVAL_S: Final = 600.0
HEARTBEAT_INTERVAL_S: Final = 30.0


def _seconds(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
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
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> HypervisorEnvironment:
        """Read the agent's variables from an environment mapping."""
        node = env.get("GPU_NODE_NAME", "").strip()
        if not node:
            raise EnvironmentValueError(
                "GPU_NODE_NAME: not set: must name the node this agent serves"
            )
        warnings: list[str] = []
        level = env.get("TF_LOG_LEVEL", "").strip().lower() or "info"
        if level == "warning":
            level = "warn"
        if level not in LOG_LEVELS:
            warnings.append(
                f'TF_LOG_LEVEL: invalid value "{env.get("TF_LOG_LEVEL")}": must be one of '
                f"{', '.join(LOG_LEVELS)}; using info"
            )
            level = "info"
        extra, extra_warnings = parse_extra_labels(
            env.get("TF_HYPERVISOR_METRICS_EXTRA_LABELS", ""), "TF_HYPERVISOR_METRICS_EXTRA_LABELS"
        )
        warnings.extend(extra_warnings)
        mode_text = env.get("TF_ISOLATION_MODE", "").strip().lower() or "soft"
        modes = {m.value: m for m in IsolationMode}
        if mode_text not in modes:
            raise EnvironmentValueError(
                f'TF_ISOLATION_MODE: invalid value "{env.get("TF_ISOLATION_MODE")}": must be '
                f"one of {', '.join(modes)}"
            )
        return cls(
            node=node,
            pod_name=env.get("POD_NAME", "").strip(),
            pool=env.get("TENSOR_FUSION_POOL_NAME", "").strip(),
            port=env_port(env, "HYPERVISOR_PORT", DEFAULT_PORT),
            bind_host=env.get("HYPERVISOR_BIND_HOST", "").strip(),
            detect_in_used_gpus=env_bool(env, "DETECT_IN_USED_GPUS", False),
            isolation_policy=env_isolation_policy(env, "TF_ISOLATION_MODE_POLICY"),
            isolation_mode=modes[mode_text],
            hardware_metadata=env.get("TF_PROVIDER_HARDWARE_METADATA", "").strip(),
            device_plugin=env_bool(env, "TF_KUBELET_DEVICE_PLUGIN", True),
            log_level=level,
            metrics_interval_s=_seconds(
                env, "TF_METRICS_INTERVAL", DEFAULT_METRICS_INTERVAL_S, MIN_METRICS_INTERVAL_S
            ),
            discovery_interval_s=_seconds(
                env, "TF_DISCOVERY_INTERVAL", DEFAULT_DISCOVERY_INTERVAL_S, 1.0
            ),
            heartbeat_interval_s=_seconds(env, "TF_HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL_S, 1.0),
            metrics_write_url=env.get("TF_METRICS_WRITE_URL", "").strip(),
            metrics_write_db=env.get("TF_METRICS_WRITE_DB", "").strip(),
            metrics_write_user=env.get("TF_METRICS_WRITE_USER", ""),
            metrics_write_password=env.get("TF_METRICS_WRITE_PASSWORD", ""),
            metrics_write_token_file=env.get("TF_METRICS_WRITE_TOKEN_FILE", "").strip(),
            metrics_write_ca_file=env.get("TF_METRICS_WRITE_CA_FILE", "").strip(),
            simulated_gpus=env.get("TF_SIMULATED_GPUS", "").strip(),
            metrics_extra_labels=extra,
            warnings=tuple(warnings),
        )
