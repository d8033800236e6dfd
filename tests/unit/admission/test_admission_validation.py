"""Every annotation rule of admission.md §5, good and bad, and the error format of §2."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tensorfusion.domain.admission import AdmissionDecision
from tensorfusion.domain.admission.validation import validate_annotations
from tensorfusion.domain.annotation_errors import AnnotationError, Code, invalid_value, problem
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.durations import RULE_DURATION, DurationError, parse_go_duration

from .admission_builders import P, make_pod, resources_ok

Run = Callable[..., AdmissionDecision]

BOOL_KEYS = [
    "is-local-gpu",
    "sidecar-worker",
    "dedicated-gpu",
    "autoscale",
    "gang-enabled",
    "require-gpu-topology",
]

GOOD = [
    ("enabled-replicas", "0"),
    ("enabled-replicas", "5"),
    ("workload-profile", "small"),
    ("gpupool", "pool-b"),
    *[(key, value) for key in BOOL_KEYS for value in ("true", "false")],
    *[("isolation", value) for value in ("shared", "soft", "hard", "partitioned")],
    ("partition-id", "1g.10gb"),
    ("tflops-limit", "0"),
    ("tflops-limit", "312"),
    ("tflops-request", "0.5"),
    ("tflops-request", "1500m"),
    ("vram-limit", "16Gi"),
    ("vram-request", "81920Mi"),
    ("vram-request", "0"),
    ("compute-percent-limit", "100"),
    ("compute-percent-request", "0.5"),
    ("gpu-count", "1"),
    ("gpu-count", "128"),
    ("gpu-indices", "0"),
    ("gpu-indices", "0, 1 ,7"),
    ("gpu-indices", ",".join(str(i) for i in range(128))),
    *[("qos", value) for value in ("low", "medium", "high", "critical")],
    ("gpu-model", "A100"),
    ("vendor", "NVIDIA"),
    ("inject-container", "app"),
    ("inject-container", " app , "),
    *[("autoscale-target", value) for value in ("compute", "vram", "all")],
    ("disable-features", "gpu-opt,mem-manager,gpu-limiter,start-worker"),
    ("gang-min-members", "0"),
    ("gang-min-members", "2"),
    *[("gang-timeout", value) for value in ("0", "0s", "300ms", "5m", "1h30m", "1.5h")],
    ("eviction-protection", "30m"),
    *[("gpu-topology-max-tier", value) for value in ("0", "3")],
    *[("gpu-topology-source", value) for value in ("auto", "numa", "vendor")],
]

RULE_BOOL = 'must be "true" or "false"'
BAD = [
    ("enabled-replicas", "-1", "must be a non-negative integer"),
    ("enabled-replicas", "two", "must be a non-negative integer"),
    ("workload-profile", " ", "must not be empty"),
    ("gpupool", "", "must not be empty"),
    *[(key, value, RULE_BOOL) for key in BOOL_KEYS for value in ("yes", "True", "1", "")],
    ("isolation", "exclusive", "must be one of shared, soft, hard, partitioned"),
    ("isolation", "Soft", "must be one of shared, soft, hard, partitioned"),
    ("partition-id", "", "must not be empty"),
    ("worker-pod-template", "spec: {}", "remote vGPU is not supported by this version"),
    ("tflops-limit", "abc", "not a quantity (example: 100)"),
    ("tflops-request", "-1", "must not be negative"),
    ("vram-request", "3Gx", "not a quantity (example: 3Gi)"),
    ("vram-limit", "16GB", "not a quantity (example: 16Gi)"),
    ("vram-limit", "-1Gi", "must not be negative"),
    ("compute-percent-limit", "0", "must be greater than 0 and at most 100"),
    ("compute-percent-request", "101", "must be greater than 0 and at most 100"),
    ("compute-percent-request", "half", "not a quantity (example: 50)"),
    ("gpu-count", "0", "must be an integer between 1 and 128"),
    ("gpu-count", "129", "must be an integer between 1 and 128"),
    ("gpu-count", "1.5", "must be an integer between 1 and 128"),
    *[
        ("gpu-indices", value, "must be a comma-separated list of 1 to 128 distinct integers >= 0")
        for value in ("", "a", "1,1", "-1", "0,,1", ",".join(str(i) for i in range(129)))
    ],
    ("qos", "urgent", "must be one of low, medium, high, critical"),
    ("gpu-model", "", "must not be empty"),
    ("vendor", "  ", "must not be empty"),
    ("inject-container", ", ,", "must list at least one container name"),
    ("inject-container", "app,nope", "no container named nope in the pod (containers: app)"),
    ("autoscale-target", "gpu", "must be one of compute, vram, all"),
    ("gang-min-members", "1", "must be 0 or an integer of at least 2"),
    ("gang-min-members", "-2", "must be a non-negative integer"),
    *[
        (key, value, "must be a non-negative duration such as 300ms, 5m or 1h30m")
        for key in ("gang-timeout", "eviction-protection")
        for value in ("5 minutes", "-5m", "5", "m", "1x")
    ],
    ("gpu-topology-max-tier", "4", "must be an integer between 0 and 3"),
    ("gpu-topology-source", "nvlink", "must be one of auto, numa, vendor"),
]


@pytest.mark.parametrize(("key", "value"), GOOD)
def test_good_values_parse_without_problems(key: str, value: str) -> None:
    _, problems, _ = validate_annotations(make_pod({key: value}), KEYS)
    assert problems == []


@pytest.mark.parametrize(("key", "value", "rule"), BAD)
def test_bad_values_are_denied_with_the_error_format(
    run: Run, key: str, value: str, rule: str
) -> None:
    decision = run(make_pod(resources_ok(**{key: value})))
    assert not decision.allowed
    assert decision.code == 400
    expected = f"{P}{key}: invalid value {_quoted(value)}: {rule}"
    assert expected in decision.message.split("; ")
    assert decision.workload is None


def _quoted(value: str) -> str:
    shown = value if len(value) <= 80 else value[:80] + "..."
    return f'"{shown}"'


@pytest.mark.parametrize("side", ["limit", "request"])
def test_tflops_and_percent_on_the_same_side_are_mutually_exclusive(run: Run, side: str) -> None:
    pod = make_pod({f"tflops-{side}": "10", f"compute-percent-{side}": "50", "vram-limit": "1Gi"})
    decision = run(pod)
    assert decision.message == (
        f'{P}compute-percent-{side}: invalid value "50": mutually exclusive with {P}tflops-{side}'
    )


def test_tflops_and_percent_on_different_sides_are_allowed(run: Run) -> None:
    decision = run(make_pod({"tflops-request": "10", "compute-percent-limit": "50"}))
    assert decision.allowed


def test_gpu_count_must_match_gpu_indices(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"gpu-count": "2", "gpu-indices": "0,1,2"})))
    assert decision.message == (
        f'{P}gpu-count: invalid value "2": must equal the number of entries of {P}gpu-indices (3)'
    )


def test_gpu_indices_set_the_count(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"gpu-indices": "3, 1"})))
    annotations = (decision.mutated_pod or {})["metadata"]["annotations"]
    assert annotations[P + "gpu-count"] == "2"
    assert annotations[P + "gpu-indices"] == "3,1"


def test_all_errors_are_reported_in_table_order(run: Run) -> None:
    pod = make_pod(
        {
            "gpu-topology-source": "x",
            "qos": "x",
            "gpu-count": "0",
            "vram-limit": "x",
            "isolation": "x",
            "enabled-replicas": "x",
        }
    )
    message = run(pod).message
    keys = [part.split(":", 1)[0] for part in message.split("; ")]
    assert keys == [
        P + "enabled-replicas",
        P + "isolation",
        P + "vram-limit",
        P + "gpu-count",
        P + "qos",
        P + "gpu-topology-source",
    ]


def test_small_vram_is_a_warning(run: Run) -> None:
    decision = run(make_pod({"tflops-limit": "10", "vram-limit": "512"}))
    assert decision.allowed
    assert any("less than 1Mi" in warning for warning in decision.warnings)


def test_unknown_disable_feature_is_a_warning(run: Run) -> None:
    decision = run(make_pod(resources_ok(**{"disable-features": "gpu-opt,turbo"})))
    assert decision.allowed
    assert any('unknown feature "turbo"' in warning for warning in decision.warnings)


def test_host_port_label_is_a_warning(run: Run) -> None:
    decision = run(make_pod(resources_ok(), labels={P + "host-port": "auto"}))
    assert decision.allowed
    assert any("host-port" in warning for warning in decision.warnings)


def test_error_format_helpers() -> None:
    item = invalid_value(P + "gpu-count", "0", "must be an integer between 1 and 128")
    assert item.message == (
        'tensor-fusion.ai/gpu-count: invalid value "0": must be an integer between 1 and 128'
    )
    quoted = invalid_value(P + "vendor", 'a"b', "x").message
    assert quoted == 'tensor-fusion.ai/vendor: invalid value "a\\"b": x'
    long_value = invalid_value(P + "worker-pod-template", "y" * 200, "x").message
    assert len(long_value) < 150
    error = AnnotationError(
        [
            problem("quota", about="gpu-count", code=Code.FORBIDDEN),
            invalid_value(P + "qos", "x", "bad"),
        ]
    )
    assert error.code == 400 and error.reason == "BadRequest"
    assert error.message == 'quota; tensor-fusion.ai/qos: invalid value "x": bad'
    assert AnnotationError([problem("q", code=Code.FORBIDDEN)]).reason == "Forbidden"
    assert AnnotationError([problem("c", code=Code.CONFLICT)]).code == 409
    with pytest.raises(ValueError, match="at least one"):
        AnnotationError([])


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [("0", 0), ("300ms", 300_000_000), ("1h30m", 5_400_000_000_000), ("1.5s", 1_500_000_000)],
)
def test_duration_parser(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text) == nanoseconds


def test_duration_parser_rejects_empty() -> None:
    with pytest.raises(DurationError) as raised:
        parse_go_duration("")
    assert raised.value.rule == RULE_DURATION
