"""Keys of `config.yaml` besides the rules: a bad value of one key keeps its previous value and
is named in `problems`."""

from __future__ import annotations

from tensorfusion.domain.alerting.dynamic_config import parse_dynamic_config


def test_hypervisor_max_crash_count_and_extra_pod_labels() -> None:
    config = parse_dynamic_config(
        "hypervisorMaxCrashCount: 0\nmetricsExtraPodLabels: {team: owner}\n", "config.yaml"
    )
    assert config.hypervisor_max_crash_count == 0 and config.problems == ()
    assert config.metrics_extra_pod_labels == {"team": "owner"}
    assert parse_dynamic_config("", "config.yaml").hypervisor_max_crash_count == 5
    bad = parse_dynamic_config("hypervisorMaxCrashCount: lots\n", "config.yaml", previous=config)
    assert bad.hypervisor_max_crash_count == 0
    assert bad.problems == (
        "config.yaml: hypervisorMaxCrashCount: invalid value 'lots': must be a whole number, "
        "0 to disable; keeping 0",
    )
    assert parse_dynamic_config("hypervisorMaxCrashCount: -1\n", "c").problems
