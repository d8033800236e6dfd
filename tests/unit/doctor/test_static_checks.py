"""The static checks of `tensor-fusion doctor` (doctor.md) on values merged over the chart's own.

For every check, a values file that passes and one that fails or warns (id, status, the fix);
the production overlay alone and with each of the guide's snippets (examples/production) gives
the status the guide promises. Values are merged with `merge_layers` as the CLI merges them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tensorfusion.domain.alerting.rules import load_rules
from tensorfusion.domain.doctor.results import CheckResult, Status
from tensorfusion.domain.doctor.static_checks import static_checks
from tensorfusion.domain.doctor.values_merge import load_values, merge_layers
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    EXTENDERS_ERROR,
)

ROOT: Final = Path(__file__).resolve().parents[3]
CHART_DIR: Final = ROOT / "charts" / "tensor-fusion"
EXAMPLES: Final = ROOT / "examples" / "production"
DEFAULTS: Final = load_values((CHART_DIR / "values.yaml").read_text(), "values.yaml")
APP_VERSION: Final = str(yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"])
OVERLAY: Final = "values-production.yaml"

# doctor.md's static table: id and guide step, in order.
TABLE: Final = [
    ("ha.replicas", "1"), ("ha.leader-elect", "1"), ("ha.anti-affinity", "1"),
    ("ha.anti-affinity-labels", "1"), ("metrics.store", "1, 2"), ("metrics.cloud-auth", "2"),
    ("metrics.password-in-values", "2"), ("metrics.standalone-in-production", "2"),
    ("alert.receiver-target", "3"), ("alert.external-addr", "3"), ("alert.command-flags", "3"),
    ("alert.builtin-rules", "3"), ("alert.rule-valid", "3"), ("versions.pinned", "4"),
    ("migration.replicas", "5"), ("migration.failure-policy", "5, more"),
    ("scheduler.config", "6"), ("rollout.workers-clients", "7"), ("rollout.batch", "7"),
    ("rollout.window", "7"), ("capacity.oversell", "8"), ("logging.level", "more"),
]  # fmt: skip
DEFAULT_COMMAND: Final = list(DEFAULTS["controller"]["command"])


def _file(name: str) -> tuple[str, dict[str, Any]]:
    path = CHART_DIR / name if name == OVERLAY else EXAMPLES / name
    return name, load_values(path.read_text(), name)


def _text(text: str, name: str = "my-values.yaml") -> tuple[str, dict[str, Any]]:
    return name, load_values(text, name)


def run(
    *files: str | tuple[str, dict[str, Any]],
    sets: Sequence[str] = (),
    release: str = "tensor-fusion-sys",
) -> dict[str, CheckResult]:
    """The checks on the chart's values merged with files (names or (name, values)) and sets."""
    loaded = [_file(f) if isinstance(f, str) else f for f in files]
    merged = merge_layers(DEFAULTS, loaded, sets)
    results = static_checks(
        merged.values,
        value_sources=merged.sources,
        default_values=DEFAULTS,
        app_version=APP_VERSION,
        release=release,
    )
    return {r.id: r for r in results}


def check(
    check_id: str,
    *files: str | tuple[str, dict[str, Any]],
    sets: Sequence[str] = (),
    release: str = "tensor-fusion-sys",
) -> CheckResult:
    result = run(*files, sets=sets, release=release)[check_id]
    assert result.id == check_id
    return result


def passes(result: CheckResult) -> None:
    assert result.status is Status.PASS, result
    assert result.found


def command_file(command: Sequence[str], extra: str = "") -> tuple[str, dict[str, Any]]:
    return _text(yaml.safe_dump({"controller": {"command": list(command)}}) + extra)


# --- the table -------------------------------------------------------------------------------


def test_every_check_of_the_table_in_order_with_its_step() -> None:
    merged = merge_layers(DEFAULTS, [], [])
    results = static_checks(
        merged.values,
        value_sources=merged.sources,
        default_values=DEFAULTS,
        app_version=APP_VERSION,
    )
    assert [(r.id, r.step) for r in results] == TABLE
    for r in results:
        assert r.found
        assert r.status is Status.PASS or r.fix, r


# --- step 1: HA ------------------------------------------------------------------------------


def test_ha_replicas() -> None:
    failed = check("ha.replicas")
    assert failed.status is Status.FAIL
    assert "controller.replicaCount is 1" in failed.found
    assert "values-production.yaml" in failed.fix and "replicaCount: 2" in failed.fix
    passes(check("ha.replicas", OVERLAY))
    wrong = check("ha.replicas", _text("controller:\n  replicaCount: two\n"))
    assert wrong.status is Status.FAIL and "not a whole number" in wrong.found


def test_ha_leader_elect_fails_without_the_flag_on_two_replicas() -> None:
    command = [c for c in DEFAULT_COMMAND if c != "-leader-elect"] + ["-enable-http2"]
    failed = check("ha.leader-elect", OVERLAY, command_file(command))
    assert failed.status is Status.FAIL
    assert "lacks -leader-elect" in failed.found
    fixed = yaml.safe_load(failed.fix)["controller"]["command"]
    assert fixed == [*DEFAULT_COMMAND, "-enable-http2"]
    passes(check("ha.leader-elect", OVERLAY))


def test_ha_leader_elect_false_and_one_replica() -> None:
    command = [c if c != "-leader-elect" else "-leader-elect=false" for c in DEFAULT_COMMAND]
    failed = check("ha.leader-elect", OVERLAY, command_file(command))
    assert failed.status is Status.FAIL and "-leader-elect=false" in failed.found
    assert "- -leader-elect\n" in failed.fix
    alone = check("ha.leader-elect", command_file(command))
    passes(alone)
    assert "harmless with 1 replica" in alone.found


def test_ha_anti_affinity_preferred_warns_required_passes() -> None:
    warned = check("ha.anti-affinity", OVERLAY)
    assert warned.status is Status.WARN and "only preferred" in warned.found
    assert "requiredDuringSchedulingIgnoredDuringExecution" in warned.fix
    assert "tensor-fusion.ai/component" in warned.fix
    passes(check("ha.anti-affinity", OVERLAY, "required-anti-affinity.yaml"))
    none = check("ha.anti-affinity", OVERLAY, _text("controller:\n  affinity: null\n"))
    assert none.status is Status.WARN and "no pod anti-affinity" in none.found


def _required_term(selector: str) -> tuple[str, dict[str, Any]]:
    return _text(
        "controller:\n  affinity:\n    podAntiAffinity:\n"
        "      requiredDuringSchedulingIgnoredDuringExecution:\n"
        f"        - topologyKey: kubernetes.io/hostname\n{selector}"
    )


def test_ha_anti_affinity_labels() -> None:
    passes(check("ha.anti-affinity-labels", OVERLAY, "required-anti-affinity.yaml"))
    passes(check("ha.anti-affinity-labels", OVERLAY))
    wrong = _required_term(
        "          labelSelector:\n            matchLabels:\n"
        "              app: tensor-fusion-controller\n"
    )
    failed = check("ha.anti-affinity-labels", OVERLAY, wrong)
    assert failed.status is Status.FAIL
    assert "app" in failed.found and "tensor-fusion.ai/component=operator" in failed.found
    assert "key: tensor-fusion.ai/component" in failed.fix and "- operator" in failed.fix


def test_ha_anti_affinity_labels_follow_the_release_and_the_selector_rules() -> None:
    instance = _required_term(
        "          labelSelector:\n            matchLabels:\n"
        "              app.kubernetes.io/instance: prod\n"
    )
    passes(check("ha.anti-affinity-labels", OVERLAY, instance, release="prod"))
    assert check("ha.anti-affinity-labels", OVERLAY, instance).status is Status.FAIL
    missing = check("ha.anti-affinity-labels", OVERLAY, _required_term(""))
    assert missing.status is Status.FAIL and "no labelSelector" in missing.found
    bad = _required_term(
        "          labelSelector:\n            matchExpressions:\n"
        "              - {key: tensor-fusion.ai/component, operator: In}\n"
    )
    invalid = check("ha.anti-affinity-labels", OVERLAY, bad)
    assert invalid.status is Status.FAIL and "operator In needs values" in invalid.found


# --- step 2: metrics -------------------------------------------------------------------------


def test_the_production_overlay_alone_fails_metrics_store() -> None:
    failed = check("metrics.store", OVERLAY)
    assert failed.status is Status.FAIL
    assert "greptimedb-standalone.greptimedb.svc.cluster.local" in failed.found
    assert "isCloud: true" in failed.fix
    assert "<greptimedb-frontend-service>" in failed.fix


def test_metrics_store_cases() -> None:
    passes(check("metrics.store"))
    passes(check("metrics.store", OVERLAY, "greptime-self-hosted.yaml"))
    embedded = check("metrics.store", OVERLAY, "embedded-store.yaml")
    assert embedded.status is Status.WARN
    assert "embedded store" in embedded.found and "lost on failover" in embedded.found
    assert "installStandalone: false" in embedded.fix
    unset = check("metrics.store", OVERLAY, sets=["greptime.host=null"])
    assert unset.status is Status.FAIL and "not set" in unset.found


def test_metrics_cloud_auth() -> None:
    failed = check("metrics.cloud-auth", OVERLAY, "greptime-cloud.yaml")
    assert failed.status is Status.FAIL and "greptime.password" in failed.found
    assert "isCloud: true" in failed.fix and "--set greptime.password" in failed.fix
    passes(
        check("metrics.cloud-auth", OVERLAY, "greptime-cloud.yaml", sets=["greptime.password=x"])
    )
    passes(
        check(
            "metrics.cloud-auth",
            OVERLAY,
            "greptime-cloud.yaml",
            sets=["greptime.existingSecret=greptime"],
        )
    )
    no_user = check(
        "metrics.cloud-auth",
        OVERLAY,
        "greptime-cloud.yaml",
        sets=["greptime.password=x", "greptime.user="],
    )
    assert no_user.status is Status.FAIL and "greptime.user" in no_user.found
    passes(check("metrics.cloud-auth", OVERLAY, "greptime-self-hosted.yaml"))


def test_metrics_password_in_values() -> None:
    in_file = _text("greptime:\n  password: hunter2\n", "secrets.yaml")
    warned = check("metrics.password-in-values", OVERLAY, "greptime-cloud.yaml", in_file)
    assert warned.status is Status.WARN and "secrets.yaml" in warned.found
    assert "--set greptime.password" in warned.fix and "existingSecret" in warned.fix
    given = check(
        "metrics.password-in-values",
        OVERLAY,
        "greptime-cloud.yaml",
        in_file,
        sets=["greptime.password=x"],
    )
    passes(given)
    assert "--set" in given.found
    passes(check("metrics.password-in-values", OVERLAY))
    rule_in_file = _text("greptime:\n  ruleReader:\n    password: hunter2\n", "rules.yaml")
    rule_warned = check("metrics.password-in-values", OVERLAY, "greptime-cloud.yaml", rule_in_file)
    assert rule_warned.status is Status.WARN
    assert "greptime.ruleReader.password is set in rules.yaml" in rule_warned.found


def test_metrics_standalone_in_production() -> None:
    warned = check("metrics.standalone-in-production", sets=["controller.replicaCount=2"])
    assert warned.status is Status.WARN and "single replica" in warned.found
    assert "installStandalone: false" in warned.fix
    passes(check("metrics.standalone-in-production"))
    passes(check("metrics.standalone-in-production", OVERLAY, "greptime-self-hosted.yaml"))


# --- step 3: alerting ------------------------------------------------------------------------


def test_alert_receiver_target() -> None:
    warned = check("alert.receiver-target", OVERLAY)
    assert warned.status is Status.WARN and "default-receiver" in warned.found
    assert "webhook_configs" in warned.fix
    passes(check("alert.receiver-target", OVERLAY, "alert-receivers.yaml"))
    passes(check("alert.receiver-target", OVERLAY, "external-alertmanager.yaml"))
    root_without = _text(
        "alert:\n  alertManagerConfig:\n    receivers:\n      - name: nowhere\n"
        "      - name: pager\n        pagerduty_configs: [{routing_key: k}]\n"
        "    route:\n      receiver: nowhere\n"
    )
    dropped = check("alert.receiver-target", OVERLAY, root_without)
    assert dropped.status is Status.WARN and "nowhere" in dropped.found


def test_alert_external_addr_fails_when_the_chart_alertmanager_is_off() -> None:
    """`alert.enabled: false` with the default command: no address."""
    failed = check("alert.external-addr", OVERLAY, _text("alert:\n  enabled: false\n"))
    assert failed.status is Status.FAIL and "no -alert-manager-addr" in failed.found
    fix = yaml.safe_load(failed.fix)
    assert fix["alert"] == {"enabled": False}
    assert fix["controller"]["command"][: len(DEFAULT_COMMAND)] == DEFAULT_COMMAND
    assert fix["controller"]["command"][-2] == "-alert-manager-addr"
    passes(check("alert.external-addr", OVERLAY, "external-alertmanager.yaml"))
    passes(check("alert.external-addr", OVERLAY))


def test_alert_external_addr_needs_a_scheme_as_the_controller_parser_says() -> None:
    command = [*DEFAULT_COMMAND, "-alert-manager-addr", "am.monitoring:9093"]
    failed = check(
        "alert.external-addr", OVERLAY, command_file(command, "alert:\n  enabled: false\n")
    )
    assert failed.status is Status.FAIL
    assert failed.found == (
        '-alert-manager-addr: invalid value "am.monitoring:9093": must be a URL with its '
        "scheme, e.g. http://alertmanager:9093"
    )
    assert "- http://am.monitoring:9093\n" in failed.fix


def test_alert_command_flags() -> None:
    passes(check("alert.command-flags", OVERLAY))
    kept = check("alert.command-flags", OVERLAY, "external-alertmanager.yaml")
    passes(kept)
    assert "adds -alert-manager-addr" in kept.found
    command = ["/manager", "-metrics-bind-address", ":9000", "-leader-elect", "-enable-http2"]
    failed = check("alert.command-flags", OVERLAY, command_file(command))
    assert failed.status is Status.FAIL
    assert "lacks -enable-auto-scale, -enable-alert, -enable-auto-expander" in failed.found
    assert yaml.safe_load(failed.fix)["controller"]["command"] == [
        *DEFAULT_COMMAND,
        "-enable-http2",
    ]


def test_alert_command_flags_reports_what_the_parser_and_kubernetes_refuse() -> None:
    typo = [*DEFAULT_COMMAND, "-leader-elec", "-zap-log-level", "trace"]
    failed = check("alert.command-flags", OVERLAY, command_file(typo))
    assert failed.status is Status.FAIL
    assert "unknown flag -leader-elec; valid flags:" in failed.found
    assert '-zap-log-level: invalid value "trace"' in failed.found
    assert "left out, the controller rejects them: -leader-elec, -zap-log-level" in failed.fix
    number = check(
        "alert.command-flags",
        OVERLAY,
        _text("controller:\n  command: [/manager, -metrics-bind-address, 9000]\n"),
    )
    assert number.status is Status.FAIL and "is 9000, not a string" in number.found


def _rules_file(rules: list[dict[str, Any]], name: str = "my-values.yaml") -> tuple[str, Any]:
    return _text(yaml.safe_dump({"dynamicConfig": {"alertRules": rules}}), name)


APPENDED: Final = yaml.safe_load((EXAMPLES / "alert-rule-appended.yaml").read_text())


def test_alert_builtin_rules() -> None:
    copied = _rules_file([*DEFAULTS["dynamicConfig"]["alertRules"], *APPENDED])
    passed = check("alert.builtin-rules", OVERLAY, copied)
    passes(passed)
    assert "plus GPUTemperatureWarning" in passed.found
    only_new = check("alert.builtin-rules", OVERLAY, _rules_file(APPENDED))
    assert only_new.status is Status.WARN
    assert "lacks 15 of the 15 built-in rules" in only_new.found
    assert "WorkerTFlopsThrottled" in only_new.found and "IdleGPU" in only_new.found
    assert "copy the whole default alertRules list" in only_new.fix


def test_alert_rule_valid_passes_the_copied_defaults_plus_the_guide_rule() -> None:
    copied = _rules_file([*DEFAULTS["dynamicConfig"]["alertRules"], *APPENDED])
    passed = check("alert.rule-valid", OVERLAY, copied)
    passes(passed)
    assert "all 16 rules" in passed.found


_GOOD_RULE: Final = {
    "name": "Mine",
    "query": "SELECT node FROM tf_node_metrics WHERE {{ .Conditions }}",
    "evaluationInterval": "30s",
    "severity": "P1",
}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{**_GOOD_RULE, "evaluationInterval": "0.5s"}], "field evaluationInterval"),
        ([{**_GOOD_RULE, "query": "SELECT {{ .Threshold "}], "does not parse as a template"),
        ([{k: v for k, v in _GOOD_RULE.items() if k != "severity"}], "field severity is required"),
        ([_GOOD_RULE, _GOOD_RULE], "is used by an earlier rule"),
    ],
)
def test_alert_rule_valid_fails_with_the_validator_message(
    rules: list[dict[str, Any]], message: str
) -> None:
    failed = check("alert.rule-valid", OVERLAY, _rules_file(rules))
    assert failed.status is Status.FAIL
    expected = "; ".join(str(problem) for problem in load_rules(rules).problems)
    assert message in expected
    assert failed.found == expected
    assert expected in failed.fix


def test_alert_rule_valid_warns_on_what_the_controller_ignores() -> None:
    typo = check("alert.rule-valid", OVERLAY, _rules_file([{**_GOOD_RULE, "treshold": 5}]))
    assert typo.status is Status.WARN and "unknown key 'treshold' ignored" in typo.found
    extra = check(
        "alert.rule-valid", OVERLAY, _text("dynamicConfig:\n  extraAlertRules: [{name: X}]\n")
    )
    assert extra.status is Status.WARN and "append rules to alertRules" in extra.fix


# --- step 4: versions ------------------------------------------------------------------------


def test_versions_pinned_passes_with_the_chart_defaults() -> None:
    passed = check("versions.pinned", OVERLAY)
    passes(passed)
    assert f"at {APP_VERSION}" in passed.found
    passes(check("versions.pinned", sets=["agent.image=tensorfusion/agent@sha256:abc"]))
    passes(check("versions.pinned", sets=["greptime.image=docker.io/greptime/greptimedb:v1.0.1"]))


@pytest.mark.parametrize(
    ("sets", "found", "fix"),
    [
        (["controller.image.tag=latest"], "controller.image", "tag: " + APP_VERSION),
        (["alert.image=quay.io/prometheus/alertmanager"], "no tag", "alertmanager:<version>"),
        (["greptime.image.tag=v1"], "floating tag v1", "tag: <version>"),
        (["providerConfigs.nvidia.images.middleware.tag=1.3"], "floating tag 1.3", "middleware:"),
        (["agent.image.tag=1"], "floating tag 1", "tag: <version>"),
    ],
)
def test_versions_pinned_warns_on_floating_tags(sets: list[str], found: str, fix: str) -> None:
    warned = check("versions.pinned", OVERLAY, sets=sets)
    assert warned.status is Status.WARN and found in warned.found
    assert fix in warned.fix


def test_versions_pinned_warns_when_controller_and_node_agent_differ() -> None:
    warned = check("versions.pinned", OVERLAY, sets=["cluster.hypervisorImage.tag=0.2.0"])
    assert warned.status is Status.WARN and "differ" in warned.found
    fix = yaml.safe_load(warned.fix)
    assert fix["controller"]["image"]["tag"] == fix["cluster"]["hypervisorImage"]["tag"]


# --- step 5: migration -----------------------------------------------------------------------


def test_migration_replicas() -> None:
    passes(check("migration.replicas", OVERLAY, "progressive-migration.yaml"))
    failed = check("migration.replicas", "progressive-migration.yaml")
    assert failed.status is Status.FAIL
    assert "nvidiaOperatorProgressiveMigration" in failed.found and "replicaCount 1" in failed.found
    assert "replicaCount: 2" in failed.fix
    auto = check("migration.replicas", sets=["dynamicConfig.autoMigration.enable=true"])
    assert auto.status is Status.FAIL and "autoMigration" in auto.found
    quoted = check(
        "migration.replicas", _text('controller:\n  nvidiaOperatorProgressiveMigration: "false"\n')
    )
    assert quoted.status is Status.FAIL, "a quoted false is true in the chart's template"
    passes(check("migration.replicas"))


def test_migration_failure_policy() -> None:
    passes(check("migration.failure-policy", OVERLAY, "failure-policy-fail.yaml"))
    warned = check(
        "migration.failure-policy",
        OVERLAY,
        sets=["controller.admissionWebhooks.failurePolicy=Ignore"],
    )
    assert warned.status is Status.WARN and "Ignore" in warned.found
    assert "failurePolicy: Fail" in warned.fix
    bogus = check(
        "migration.failure-policy", sets=["controller.admissionWebhooks.failurePolicy=Never"]
    )
    assert bogus.status is Status.FAIL and "neither Fail nor Ignore" in bogus.found


# --- step 6: scheduler -----------------------------------------------------------------------


def _scheduler(change: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    config = {**DEFAULTS["schedulerConfig"], **change}
    return _text(yaml.safe_dump({"schedulerConfig": config}))


def test_scheduler_config_passes_with_the_default_block() -> None:
    passes(check("scheduler.config", OVERLAY))


@pytest.mark.parametrize(
    ("values", "found"),
    [
        (_scheduler({"extenders": [{"urlPrefix": "http://x"}]}), EXTENDERS_ERROR),
        (_scheduler({"profiles": [{"schedulerName": "default-scheduler"}]}),
         "no profile named 'tensor-fusion-scheduler'"),
        (_scheduler({"profiles": [{"schedulerName": "tensor-fusion-scheduler"}]}),
         "enables no GPUNetworkTopologyAware and no GPUResourcesFit"),
        (_scheduler({"kind": "Deployment"}), "schedulerConfig.kind"),
        (_text("schedulerConfig: null\n"), "schedulerConfig: not a mapping"),
    ],
)  # fmt: skip
def test_scheduler_config_fails_with_the_controller_error(
    values: tuple[str, dict[str, Any]], found: str
) -> None:
    failed = check("scheduler.config", OVERLAY, values)
    assert failed.status is Status.FAIL and found in failed.found
    assert "schedulerName: tensor-fusion-scheduler" in failed.fix
    assert "copy the whole default block" in failed.fix


def test_scheduler_config_warns_with_the_derivation_warnings() -> None:
    warned = check("scheduler.config", OVERLAY, _scheduler({"percentageOfNodesToScore": 50}))
    assert warned.status is Status.WARN and "percentageOfNodesToScore is 50" in warned.found


# --- step 7: rollout -------------------------------------------------------------------------


_POLICY: Final = "cluster.pool.nodePoolRollingUpdatePolicy"


def test_rollout_workers_clients() -> None:
    passes(check("rollout.workers-clients", OVERLAY, "rolling-update.yaml"))
    warned = check("rollout.workers-clients", OVERLAY, sets=[f"{_POLICY}.autoUpdateWorker=true"])
    assert warned.status is Status.WARN and "autoUpdateWorker is true" in warned.found
    assert "autoUpdateWorker: false" in warned.fix and "autoUpdateClient: false" in warned.fix


def test_rollout_batch() -> None:
    passed = check("rollout.batch", OVERLAY, "rolling-update.yaml")
    passes(passed)
    assert "batches of 20% every 5m" in passed.found
    warned = check("rollout.batch", OVERLAY, sets=[f"{_POLICY}.batchPercentage=100"])
    assert warned.status is Status.WARN and "batchPercentage 100" in warned.found
    assert "batchPercentage: 20" in warned.fix and "batchInterval: 5m" in warned.fix
    absent = check("rollout.batch", OVERLAY, sets=[f"{_POLICY}.batchPercentage=null"])
    assert absent.status is Status.WARN, "the pool's default batchPercentage is 100"
    invalid = check("rollout.batch", OVERLAY, sets=[f"{_POLICY}.batchPercentage=200"])
    assert invalid.status is Status.FAIL and "batchPercentage" in invalid.found


def test_rollout_window_is_a_note_with_the_opt_in() -> None:
    window = _text(
        "cluster:\n  pool:\n    nodePoolRollingUpdatePolicy:\n"
        "      maintenanceWindow:\n        includes: ['0 2 * * 6']\n"
    )
    noted = check("rollout.window", OVERLAY, window)
    assert noted.status is Status.PASS and "recorded, not enforced" in noted.found
    annotation = "tensor-fusion.ai/honour-maintenance-window=true"
    assert noted.fix == f"kubectl annotate gpupool tensor-fusion-shared {annotation}"
    plain = check("rollout.window", OVERLAY, "rolling-update.yaml")
    passes(plain)
    assert plain.fix == ""


# --- step 8 and more -------------------------------------------------------------------------


def test_capacity_oversell() -> None:
    passes(check("capacity.oversell", OVERLAY, "conservative-oversubscription.yaml"))
    warned = check("capacity.oversell", OVERLAY)
    assert warned.status is Status.WARN
    assert "tflopsOversellRatio 2000 (at most 300)" in warned.found
    assert "tflopsOversellRatio: 300" in warned.fix and "vramExpandToHostDisk: 20" in warned.fix
    partial = check(
        "capacity.oversell",
        OVERLAY,
        "conservative-oversubscription.yaml",
        sets=["cluster.pool.capacityConfig.oversubscription.vramExpandToHostDisk=null"],
    )
    assert partial.status is Status.WARN, "an absent vramExpandToHostDisk is the pool's 70"
    passes(
        check(
            "capacity.oversell", OVERLAY, sets=["cluster.pool.capacityConfig.oversubscription=null"]
        )
    )


def test_logging_level_is_fixed_by_the_chart() -> None:
    """No value changes TF_LOG_LEVEL (the template writes `info`): PASS with a note."""
    noted = check("logging.level", OVERLAY)
    passes(noted)
    assert "TF_LOG_LEVEL=info" in noted.found and "no value changes it" in noted.found
    attempt = _text(
        "cluster:\n  pool:\n    hypervisor:\n      env: [{name: TF_LOG_LEVEL, value: debug}]\n"
    )
    passes(check("logging.level", OVERLAY, attempt))


def test_no_pool_checks_without_the_cluster() -> None:
    results = run(OVERLAY, sets=["cluster.enabled=false"])
    for check_id in (
        "rollout.workers-clients",
        "rollout.batch",
        "rollout.window",
        "capacity.oversell",
        "logging.level",
    ):
        assert results[check_id].status is Status.PASS
        assert "no pool rendered" in results[check_id].found


# --- the guide's snippets on the overlay -----------------------------------------------------


@pytest.mark.parametrize(
    ("files", "sets", "check_id", "status"),
    [
        ((), (), "metrics.store", Status.FAIL),
        (("required-anti-affinity.yaml",), (), "ha.anti-affinity", Status.PASS),
        (("required-anti-affinity.yaml",), (), "ha.anti-affinity-labels", Status.PASS),
        (("greptime-cloud.yaml",), ("greptime.password=x",), "metrics.store", Status.PASS),
        (("greptime-cloud.yaml",), ("greptime.password=x",), "metrics.cloud-auth", Status.PASS),
        (("greptime-cloud.yaml",), ("greptime.password=x",), "metrics.password-in-values",
         Status.PASS),
        (("greptime-self-hosted.yaml",), (), "metrics.store", Status.PASS),
        (("embedded-store.yaml",), (), "metrics.store", Status.WARN),
        (("alert-receivers.yaml",), (), "alert.receiver-target", Status.PASS),
        (("external-alertmanager.yaml",), (), "alert.external-addr", Status.PASS),
        (("external-alertmanager.yaml",), (), "alert.command-flags", Status.PASS),
        (("progressive-migration.yaml",), (), "migration.replicas", Status.PASS),
        (("rolling-update.yaml",), (), "rollout.batch", Status.PASS),
        (("rolling-update.yaml",), (), "rollout.workers-clients", Status.PASS),
        (("conservative-oversubscription.yaml",), (), "capacity.oversell", Status.PASS),
        (("failure-policy-fail.yaml",), (), "migration.failure-policy", Status.PASS),
    ],
)  # fmt: skip
def test_the_overlay_with_each_snippet_gives_what_the_guide_promises(
    files: tuple[str, ...], sets: tuple[str, ...], check_id: str, status: Status
) -> None:
    assert check(check_id, OVERLAY, *files, sets=sets).status is status


def test_every_snippet_of_the_examples_is_covered() -> None:
    covered = {
        "required-anti-affinity.yaml",
        "greptime-cloud.yaml",
        "greptime-self-hosted.yaml",
        "embedded-store.yaml",
        "alert-receivers.yaml",
        "external-alertmanager.yaml",
        "alert-rule-appended.yaml",
        "progressive-migration.yaml",
        "rolling-update.yaml",
        "conservative-oversubscription.yaml",
        "failure-policy-fail.yaml",
    }
    assert {path.name for path in EXAMPLES.glob("*.yaml")} == covered


def test_the_overlay_with_every_snippet_leaves_only_the_expected_findings() -> None:
    snippets = [
        "required-anti-affinity.yaml",
        "greptime-self-hosted.yaml",
        "alert-receivers.yaml",
        "progressive-migration.yaml",
        "rolling-update.yaml",
        "conservative-oversubscription.yaml",
        "failure-policy-fail.yaml",
    ]
    results = run(OVERLAY, *snippets)
    assert {r.id: r.status for r in results.values() if r.status is not Status.PASS} == {}
