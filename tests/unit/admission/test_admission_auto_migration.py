"""Auto-migration scope (admission.md §10): reading `autoMigration` once, rules and selectors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.domain.admission import (
    AdmissionDecision,
    AdmissionOutcome,
    AutoMigrationConfig,
    facts_needed,
    read_auto_migration,
)
from tensorfusion.domain.admission.auto_migration import ScopeRule, auto_migration_selects
from tensorfusion.domain.label_selector import (
    SelectorError,
    parse_selector,
    selector_matches,
)

from .admission_builders import P, make_pod, native_container

Run = Callable[..., AdmissionDecision]
NATIVE = [native_container("a", 1)]
RULE_NS = {"namespaceNames": ["team-a"]}
RULE_POD = {"podSelector": {"matchLabels": {"app": "train"}}}
RULE_NS_SELECTOR = {"namespaceSelector": {"matchLabels": {"gpu": "yes"}}}
RULE_ERROR = "auto-migration rule error, pod not migrated: "


def selects(
    config: Any,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> tuple[bool, tuple[str, ...]]:
    pod = make_pod(enabled=None, labels=labels, containers=NATIVE)
    return auto_migration_selects(pod, namespace, read_auto_migration(config), namespace_labels)


def enabled(scope: Any) -> dict[str, Any]:
    return {"enable": True, "scope": scope}


@pytest.mark.parametrize(
    ("scope", "namespace", "labels", "namespace_labels", "expected"),
    [
        (None, "default", {}, None, True),
        ({}, "default", {}, None, True),
        ({"includes": [RULE_NS]}, "team-a", {}, None, True),
        ({"includes": [RULE_NS]}, "team-b", {}, None, False),
        ({"includes": [RULE_POD]}, "x", {"app": "train"}, None, True),
        ({"includes": [RULE_NS_SELECTOR]}, "x", {}, {"gpu": "yes"}, True),
        ({"includes": [RULE_NS_SELECTOR]}, "x", {}, {"gpu": "no"}, False),
        ({"includes": []}, "x", {}, None, True),
        ({"excludes": [RULE_NS]}, "team-a", {}, None, False),
        ({"excludes": [RULE_NS]}, "team-b", {}, None, True),
        ({"excludes": [RULE_POD], "includes": [RULE_NS]}, "team-a", {"app": "train"}, None, False),
    ],
)
def test_scope_rules_as_a_list(
    scope: dict[str, Any] | None,
    namespace: str,
    labels: dict[str, str],
    namespace_labels: dict[str, str] | None,
    expected: bool,
) -> None:
    config: dict[str, Any] = {"enable": True}
    if scope is not None:
        config["scope"] = scope
    assert selects(config, namespace, labels, namespace_labels) == (expected, ())


# Regression: `includes` / `excludes` written as one object (as the chart and the spec write
# them) were read as "no rules", so every native-GPU pod migrated.
@pytest.mark.parametrize(
    ("scope", "namespace", "labels", "namespace_labels", "expected"),
    [
        ({"includes": RULE_NS}, "team-a", {}, None, True),
        ({"includes": RULE_NS}, "team-b", {}, None, False),
        ({"includes": RULE_POD}, "x", {"app": "train"}, None, True),
        ({"includes": RULE_POD}, "x", {"app": "serve"}, None, False),
        ({"includes": RULE_NS_SELECTOR}, "x", {}, {"gpu": "yes"}, True),
        ({"includes": RULE_NS_SELECTOR}, "x", {}, {"gpu": "no"}, False),
        ({"excludes": RULE_NS}, "team-a", {}, None, False),
        ({"excludes": RULE_NS}, "team-b", {}, None, True),
        ({"excludes": RULE_POD, "includes": RULE_NS}, "team-a", {"app": "train"}, None, False),
        ({"excludes": RULE_POD, "includes": RULE_NS}, "team-a", {"app": "serve"}, None, True),
        ({"includes": {**RULE_NS, **RULE_POD}}, "team-b", {"app": "train"}, None, True),
        ({"includes": {}}, "team-b", {}, None, True),
    ],
)
def test_scope_rules_written_as_one_object(
    scope: dict[str, Any],
    namespace: str,
    labels: dict[str, str],
    namespace_labels: dict[str, str] | None,
    expected: bool,
) -> None:
    assert selects(enabled(scope), namespace, labels, namespace_labels) == (expected, ())


def test_object_form_includes_keep_other_namespaces_native(run: Run) -> None:
    config = enabled({"includes": {"namespaceNames": ["team-a"]}})
    outside = make_pod(enabled=None, containers=NATIVE, namespace="team-b")
    decision = run(outside, auto_migration=config)
    assert decision.outcome is AdmissionOutcome.UNTOUCHED and decision.patch == ()
    inside = make_pod(enabled=None, containers=NATIVE, namespace="team-a")
    migrated = run(inside, auto_migration=config)
    assert migrated.outcome is AdmissionOutcome.MUTATED
    assert (migrated.mutated_pod or {})["metadata"]["labels"][P + "enabled"] == "true"


def test_config_is_read_into_typed_rules() -> None:
    config = read_auto_migration(
        enabled({"includes": {"namespaceNames": ["a"], "podSelector": {"matchLabels": {"x": "1"}}}})
    )
    assert config.enable and config.error is None and config.excludes == ()
    (rule,) = config.includes
    assert isinstance(rule, ScopeRule)
    assert rule.namespace_names == ("a",) and rule.namespace_selector is None
    assert rule.pod_selector is not None and rule.pod_selector.match_labels == {"x": "1"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            enabled({"includes": "team-a"}),
            'autoMigration.scope.includes: invalid value "team-a": must be a rule object '
            "(namespaceNames, namespaceSelector, podSelector) or a list of rule objects",
        ),
        (
            enabled({"excludes": ["team-a"]}),
            'autoMigration.scope.excludes: invalid value ["team-a"]: must be a rule object '
            "(namespaceNames, namespaceSelector, podSelector) or a list of rule objects",
        ),
        (
            enabled({"includes": 3}),
            "autoMigration.scope.includes: invalid value 3: must be a rule object",
        ),
        (
            enabled(["team-a"]),
            'autoMigration.scope: invalid value ["team-a"]: must be an object (includes, excludes)',
        ),
        (
            enabled({"include": RULE_NS}),
            "autoMigration.scope.include: unknown field (allowed: includes, excludes)",
        ),
        (
            enabled({"includes": {"namespaces": ["team-a"]}}),
            "autoMigration.scope.includes.namespaces: unknown field "
            "(allowed: namespaceNames, namespaceSelector, podSelector)",
        ),
        (
            enabled({"includes": {"namespaceNames": "team-a"}}),
            'autoMigration.scope.includes.namespaceNames: invalid value "team-a": '
            "must be a list of names",
        ),
        (
            enabled({"includes": [RULE_NS, {"podSelector": {"matchLabels": ["a"]}}]}),
            'autoMigration.scope.includes[1].podSelector.matchLabels: invalid value ["a"]: '
            "must be an object",
        ),
        (
            {"enable": "yes", "scope": {"includes": RULE_NS}},
            'autoMigration.enable: invalid value "yes": must be true or false',
        ),
    ],
)
def test_malformed_scope_is_a_rule_error_naming_the_value(
    config: dict[str, Any] | list[Any], message: str
) -> None:
    typed = read_auto_migration(config)
    assert typed.error is not None and message in typed.error
    if typed.enable:
        selected, warnings = auto_migration_selects(
            make_pod(enabled=None, containers=NATIVE, namespace="team-a"),
            "team-a",
            typed,
            {},
        )
        assert not selected
        assert len(warnings) == 1 and warnings[0].startswith(RULE_ERROR)
        assert message in warnings[0]


def test_malformed_scope_leaves_the_pod_native_with_a_warning(run: Run) -> None:
    pod = make_pod(enabled=None, containers=NATIVE, namespace="team-a")
    decision = run(pod, auto_migration=enabled({"includes": "team-a"}))
    assert decision.outcome is AdmissionOutcome.UNTOUCHED and decision.patch == ()
    assert [w for w in decision.warnings if w.startswith(RULE_ERROR)] == [
        RULE_ERROR + 'autoMigration.scope.includes: invalid value "team-a": must be a rule '
        "object (namespaceNames, namespaceSelector, podSelector) or a list of rule objects"
    ]


@pytest.mark.parametrize(
    ("rule", "namespace_labels", "message"),
    [
        (RULE_NS_SELECTOR, None, 'namespace "x" could not be read'),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            {},
            "autoMigration.scope.includes[0].podSelector.matchExpressions[0].operator: "
            'invalid value "Near": must be one of',
        ),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            {},
            "autoMigration.scope.includes[0].podSelector.matchExpressions[0].values: "
            "operator In needs values",
        ),
    ],
)
def test_rule_errors_mean_not_migrated_with_a_warning(
    run: Run, rule: dict[str, Any], namespace_labels: dict[str, str] | None, message: str
) -> None:
    config = enabled({"includes": [rule]})
    selected, warnings = selects(config, "x", namespace_labels=namespace_labels)
    assert not selected
    assert len(warnings) == 1 and message in warnings[0]
    pod = make_pod(enabled=None, containers=NATIVE, namespace="x")
    decision = run(pod, auto_migration=config, namespace_labels=namespace_labels)
    assert decision.outcome is AdmissionOutcome.UNTOUCHED
    assert any(w.startswith(RULE_ERROR) and message in w for w in decision.warnings)


def test_auto_migration_disabled() -> None:
    assert selects({"enable": False}) == (False, ())
    assert selects(None) == (False, ())
    assert selects({"enable": False, "scope": {"includes": "bad"}}) == (False, ())
    assert read_auto_migration(None) == AutoMigrationConfig()


def test_namespace_labels_are_needed_only_for_a_namespace_selector() -> None:
    native = make_pod(enabled=None, containers=NATIVE)
    for scope in ({"includes": RULE_NS_SELECTOR}, {"excludes": [RULE_NS_SELECTOR]}):
        needs = facts_needed(native, auto_migration=read_auto_migration(enabled(scope)))
        assert needs.tf_candidate and needs.namespace_labels
    needs = facts_needed(native, auto_migration=read_auto_migration(enabled({"includes": RULE_NS})))
    assert needs.tf_candidate and not needs.namespace_labels


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_selector_matches(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(parse_selector(selector, "podSelector"), labels) is expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'podSelector.matchExpressions[0].values: invalid value ["x"]: '
            "operator Exists takes no values",
        ),
        ({"matchLabels": ["a"]}, 'podSelector.matchLabels: invalid value ["a"]: must be an object'),
        ({"matchLabel": {"a": "1"}}, "podSelector.matchLabel: unknown field"),
        (["a"], 'podSelector: invalid value ["a"]: must be a label selector object'),
        (
            {"matchExpressions": [{"key": "", "operator": "Exists"}]},
            "podSelector.matchExpressions[0].key: must not be empty",
        ),
    ],
)
def test_selector_errors_name_the_field_and_value(selector: Any, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(selector, "podSelector")
    assert message in str(caught.value)


def test_a_non_boolean_enable_is_reported_to_native_gpu_pods(run: Run) -> None:
    config = {"enable": "true", "scope": {"includes": RULE_NS}}
    message = 'autoMigration.enable: invalid value "true": must be true or false'
    assert selects(config, "team-a") == (False, (RULE_ERROR + message,))
    pod = make_pod(enabled=None, containers=NATIVE, namespace="team-a")
    decision = run(pod, auto_migration=config)
    assert decision.outcome is AdmissionOutcome.UNTOUCHED
    assert decision.warnings == (RULE_ERROR + message,)
    # Pods without native GPUs, and pods labelled "false", are not candidates: no warning.
    assert not run(make_pod(enabled=None), auto_migration=config).warnings
    labelled = make_pod(enabled=False, containers=NATIVE, namespace="team-a")
    assert not run(labelled, auto_migration=config).warnings


@pytest.mark.parametrize(
    ("scope", "where", "value"),
    [
        ({"includes": [{}]}, "includes[0]", "{}"),
        ({"includes": {"namespaceNames": []}}, "includes", '{"namespaceNames":[]}'),
        (
            {"excludes": [RULE_NS, {"namespaceNames": None, "podSelector": None}]},
            "excludes[1]",
            '{"namespaceNames":null,"podSelector":null}',
        ),
    ],
)
def test_an_empty_rule_is_a_rule_error(scope: dict[str, Any], where: str, value: str) -> None:
    message = (
        f"autoMigration.scope.{where}: invalid value {value}: an empty rule matches no pod; "
        "give namespaceNames (not empty), namespaceSelector or podSelector"
    )
    assert read_auto_migration(enabled(scope)).error == message
    assert selects(enabled(scope), "team-a") == (False, (RULE_ERROR + message,))
