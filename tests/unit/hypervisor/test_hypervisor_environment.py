"""The node agent's environment: defaults, the pod's variables, and one clear error per bad
value (an invalid TF_LOG_LEVEL only warns)."""

from __future__ import annotations

import pytest

from tensorfusion.domain.settings.environment_values import EnvironmentValueError
from tensorfusion.domain.settings.hypervisor_environment import HypervisorEnvironment
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy


def test_the_pods_variables_are_read() -> None:
    env = HypervisorEnvironment.from_mapping({
        "GPU_NODE_NAME": "gpu-1", "POD_NAME": "hypervisor-gpu-1", "TENSOR_FUSION_POOL_NAME": "p",
        "HYPERVISOR_PORT": "8001", "DETECT_IN_USED_GPUS": "true",
        "TF_ISOLATION_MODE_POLICY": "dynamic", "TF_ISOLATION_MODE": "Hard",
        "TF_PROVIDER_HARDWARE_METADATA": '[{"model": "H100", "fp16TFlops": "989"}]',
        "TF_LOG_LEVEL": "DEBUG", "TF_METRICS_INTERVAL": "5s",
    })  # fmt: skip
    assert (env.node, env.pool, env.port, env.detect_in_used_gpus) == ("gpu-1", "p", 8001, True)
    assert env.isolation_policy is IsolationPolicy.DYNAMIC
    assert env.isolation_mode is IsolationMode.HARD
    assert env.hardware_metadata == '[{"model": "H100", "fp16TFlops": "989"}]'
    assert env.device_plugin
    assert (env.log_level, env.metrics_interval_s, env.warnings) == ("debug", 5.0, ())
    defaults = HypervisorEnvironment.from_mapping({"GPU_NODE_NAME": "n"})
    assert (defaults.port, defaults.metrics_interval_s, defaults.discovery_interval_s) == (
        8000, 10.0, 600.0)  # fmt: skip
    assert defaults.isolation_mode is IsolationMode.SOFT and defaults.log_level == "info"


def test_an_invalid_log_level_is_info_with_a_warning() -> None:
    env = HypervisorEnvironment.from_mapping({"GPU_NODE_NAME": "n", "TF_LOG_LEVEL": "loud"})
    assert env.log_level == "info"
    assert env.warnings == ('TF_LOG_LEVEL: invalid value "loud": must be one of debug, info, '
                            "warn, error; using info",)  # fmt: skip


@pytest.mark.parametrize(("variables", "message"), [
    ({}, "GPU_NODE_NAME: not set: must name the node this agent serves"),
    ({"HYPERVISOR_PORT": "80000"}, 'HYPERVISOR_PORT: invalid value "80000": must be a port'),
    ({"DETECT_IN_USED_GPUS": "maybe"}, 'DETECT_IN_USED_GPUS: invalid value "maybe": must be'),
    ({"TF_ISOLATION_MODE": "strict"}, 'TF_ISOLATION_MODE: invalid value "strict": must be one'),
    ({"TF_ISOLATION_MODE_POLICY": "x"}, 'TF_ISOLATION_MODE_POLICY: invalid value "x": must be'),
    ({"TF_METRICS_INTERVAL": "10"}, 'TF_METRICS_INTERVAL: invalid value "10": must be a dura'),
    ({"TF_METRICS_INTERVAL": "500ms"}, 'TF_METRICS_INTERVAL: invalid value "500ms": must be at'),
    ({"TF_KUBELET_DEVICE_PLUGIN": "no way"}, 'TF_KUBELET_DEVICE_PLUGIN: invalid value "no w'),
    ({"TF_MPS": "always"}, 'TF_MPS: invalid value "always": must be one of auto, on, off'),
])  # fmt: skip
def test_a_bad_value_is_one_clear_error(variables: dict[str, str], message: str) -> None:
    env = {"GPU_NODE_NAME": "n", **variables} if variables else {}
    with pytest.raises(EnvironmentValueError) as raised:
        HypervisorEnvironment.from_mapping(env)
    assert str(raised.value).startswith(message)


def test_extra_metric_labels_are_read_and_bad_ones_only_warn() -> None:
    env = HypervisorEnvironment.from_mapping({
        "GPU_NODE_NAME": "n",
        "TF_HYPERVISOR_METRICS_EXTRA_LABELS": '{"team.example.com/owner": "owner", "x": "node"}',
    })  # fmt: skip
    assert env.metrics_extra_labels == {"team.example.com/owner": "owner"}
    assert env.warnings == ("TF_HYPERVISOR_METRICS_EXTRA_LABELS: x -> node ignored: node is a "
                            "built-in tag",)  # fmt: skip
    broken = HypervisorEnvironment.from_mapping(
        {"GPU_NODE_NAME": "n", "TF_HYPERVISOR_METRICS_EXTRA_LABELS": "[1]"}
    )
    assert broken.metrics_extra_labels == {}
    assert broken.warnings == ("TF_HYPERVISOR_METRICS_EXTRA_LABELS: invalid value '[1]': must be "
                               "a JSON object mapping pod label keys to tag names; no extra "
                               "tags",)  # fmt: skip
