"""A trace entry's `usage` profile: the format and its bounds (exit 2 naming file, entry and
field), and the percentiles it gives (`domain/autoscaling/usage_profile.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tensorfusion.cli.main import app
from tensorfusion.domain.autoscaling.recommendation import percentile
from tensorfusion.domain.autoscaling.usage_profile import (
    UsagePoint,
    counted_percentile,
    profile_percentiles,
    sample_counts,
)
from tensorfusion.sim.input_limits import MAX_USAGE_POINTS
from tensorfusion.sim.usage_profiles import UsageSpec
from tests.hypothesis_budget import examples

from .traces import PREFIX

CLUSTER = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


def entry(**extra: Any) -> dict[str, Any]:
    pod = {"metadata": {"labels": {PREFIX + "enabled": "true"},
                        "annotations": {PREFIX + "tflops-request": "10",
                                        PREFIX + "vram-request": "8Gi"}},
           "spec": {"containers": [{"name": "c"}]}}  # fmt: skip
    return {"name": "svc", "replicas": 2, "pod": pod, **extra}


def simulate(tmp_path: Path, *entries: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump({"workloads": list(entries)}), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["simulate", str(CLUSTER), str(path), "--auto-scale", "--no-alerts", "--quiet"]
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr


def points(*pairs: tuple[float | str, float]) -> list[dict[str, float | str]]:
    return [{"at": at, "fraction": fraction} for at, fraction in pairs]


# ---- the format ----------------------------------------------------------------------------


def test_a_constant_is_one_point_at_the_start_and_a_list_a_step_function() -> None:
    spec = UsageSpec.model_validate({"tflops": 0.3, "vram": points((0, 0.9), ("10m", 0.4))})
    profile = spec.profile()
    assert profile.compute == (UsagePoint(0.0, 0.3),)
    assert profile.vram == (UsagePoint(0.0, 0.9), UsagePoint(600.0, 0.4))


@pytest.mark.parametrize(
    ("usage", "fragments"),
    [
        ({"tflops": 11}, ["usage.tflops", "invalid value 11", "from 0 to 10"]),
        ({"vram": -0.1}, ["usage.vram", "invalid value -0.1", "from 0 to 10"]),
        ({"tflops": float("nan")}, ["usage.tflops", "finite"]),
        ({"tflops": float("inf")}, ["usage.tflops", "finite"]),
        ({"tflops": "30%"}, ["usage.tflops", "'30%'", "a list of {at, fraction} points"]),
        ({"tflops": True}, ["usage.tflops", "a list of {at, fraction} points"]),
        ({"vram": points((0, 0.5), (0, 0.6))}, ["usage.vram", "[1].at", "times must increase"]),
        ({"vram": points((0, 0.5), (60, 0.6), (30, 0.2))}, ["usage.vram", "[2].at", "30s"]),
        ({"vram": points((60, 0.5))}, ["usage.vram", "[0].at", "the first point must be at 0s"]),
        ({"vram": points((0, 12))}, ["usage.vram[0].fraction", "invalid value 12"]),
        ({"vram": points((-5, 0.2))}, ["usage.vram[0].at", "invalid value -5"]),
        ({"vram": points(("soon", 0.2))}, ["usage.vram[0].at", "'soon'", "not a duration"]),
        ({"vram": [{"at": 0}]}, ["usage.vram[0].fraction", "Field required"]),
        ({"vram": [{"at": 0, "fraction": 0.2, "peak": 1}]}, ["usage.vram[0].peak"]),
        ({"vram": []}, ["usage.vram", "at least one point"]),
        ({}, ["usage", "give tflops, vram or both"]),
        ({"cpu": 0.3}, ["usage.cpu"]),
    ],
)
def test_a_bad_profile_exits_2_naming_file_entry_field_and_value(
    tmp_path: Path, usage: dict[str, Any], fragments: list[str]
) -> None:
    code, stderr = simulate(tmp_path, entry(usage=usage))
    assert code == 2
    line = stderr.strip()
    assert line.startswith("error: ") and "\n" not in line, stderr
    for fragment in [str(tmp_path / "workload.yaml"), "workloads[0]", *fragments]:
        assert fragment in line, (fragment, line)


def test_the_points_are_counted_before_any_is_built(tmp_path: Path) -> None:
    many = points(*((i, 0.1) for i in range(MAX_USAGE_POINTS + 1)))
    code, stderr = simulate(tmp_path, entry(usage={"vram": many}))
    assert code == 2
    assert f"{MAX_USAGE_POINTS + 1:,} points: the limit is {MAX_USAGE_POINTS:,}" in stderr
    code, _ = simulate(tmp_path, entry(usage={"vram": many[:MAX_USAGE_POINTS]}))
    assert code == 0


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        ({"autoSetResources": {"marginFraction": "11"}}, ["marginFraction", '"11"']),
        ({"autoSetResources": {"targetVRAMPercentile": "0.3"}},
         ["lowerBoundVRAMPercentile <= targetVRAMPercentile"]),
        ({"autoSetResources": {"margin": "0.2"}}, ["autoSetResources.margin: unknown field"]),
    ],
)  # fmt: skip
def test_a_bad_autoscaling_config_exits_2_naming_the_field(
    tmp_path: Path, config: dict[str, Any], fragments: list[str]
) -> None:
    code, stderr = simulate(tmp_path, entry(usage={"vram": 0.5}, autoScalingConfig=config))
    assert code == 2
    for fragment in ["workloads[0].autoScalingConfig", *fragments]:
        assert fragment in stderr, (fragment, stderr)


def test_a_bad_scaling_rule_of_a_pool_exits_2_naming_it(tmp_path: Path) -> None:
    data = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    data["pools"][0]["verticalScalingRules"] = [
        {"name": "ok", "autoScaling": {"autoSetResources": {"marginFraction": "0.1"}}},
        {"name": "bad", "autoScaling": {"autoSetResources": {"minVRAMResourcesRatio": "0"}}},
        {"name": "typo", "selektor": {}},
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(data), encoding="utf-8")
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump({"workloads": [entry()]}), encoding="utf-8")
    result = CliRunner().invoke(app, ["simulate", str(cluster), str(workload), "--quiet"])
    assert result.exit_code == 2
    where = "pools[0] (tensor-fusion-shared).verticalScalingRules"
    assert f"{where}[1].autoScaling.autoSetResources.minVRAMResourcesRatio" in result.stderr
    assert f"{where}[2].selektor: unknown field" in result.stderr
    assert f"{where}[0]" not in result.stderr


def test_an_ordinary_pod_cannot_carry_a_usage_profile(tmp_path: Path) -> None:
    native = {"name": "web", "pod": {"spec": {"containers": [{"name": "c"}]}},
              "usage": {"vram": 0.5}}  # fmt: skip
    code, stderr = simulate(tmp_path, entry(), native)
    assert code == 2
    assert "workloads[1]" in stderr and "only TensorFusion pods are right-sized" in stderr


def test_the_openb_trace_refuses_auto_scale(tmp_path: Path) -> None:
    csv = tmp_path / "x.csv"
    csv.write_text("name\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["simulate", "--openb", str(csv), str(csv), "--auto-scale", "--quiet"]
    )
    assert result.exit_code == 2
    assert "--auto-scale: not with --openb" in result.stderr


# ---- the percentiles -----------------------------------------------------------------------


def test_a_run_is_sampled_every_10_seconds_from_its_start() -> None:
    profile = [UsagePoint(0, 0.1), UsagePoint(25, 0.5), UsagePoint(100, 0.9)]
    # Samples at 0, 10, 20 (0.1) and 30, 40, 50 (0.5); the third point is after the end.
    assert sample_counts(profile, 60) == [(0.1, 3), (0.5, 3)]
    assert sample_counts(profile, 5) == [(0.1, 1)]
    assert sample_counts(profile, 0) == []


@settings(max_examples=examples(200), deadline=None)
@given(
    counts=st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.integers(0, 40)), min_size=0, max_size=8
    ),
    fraction=st.floats(0.01, 1),
)
def test_counted_percentiles_equal_the_percentile_of_the_listed_samples(
    counts: list[tuple[float, int]], fraction: float
) -> None:
    listed = [value for value, n in counts for _ in range(n)]
    assert counted_percentile(counts, fraction) == percentile(listed, fraction)


def test_percentiles_scale_with_the_request_and_count_every_worker_and_gpu() -> None:
    profile = [UsagePoint(0, 0.9), UsagePoint(300, 0.4)]  # 5 minutes at 90%, then 40%
    found = profile_percentiles(profile, duration_s=3600, request=20_000, rows_per_sample=6,
                                fractions=(0.5, 0.95, 0.99))  # fmt: skip
    assert found.samples == 360 * 6
    assert (found.lower, found.target) == (0.4 * 20_000, 0.9 * 20_000)  # 30 of 360 at 90%
    longer = profile_percentiles(profile, duration_s=12_000, request=20_000, rows_per_sample=1,
                                 fractions=(0.5, 0.95, 0.99))  # fmt: skip
    assert longer.target == 0.4 * 20_000  # 30 of 1,200 at 90%: under 5%
