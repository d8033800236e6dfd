"""Classification (admission.md §3), auto-migration scope (§10) and label selectors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.domain.admission import AdmissionDecision, Outcome
from tensorfusion.domain.admission.auto_migration import auto_migration_selects
from tensorfusion.domain.admission.classification import Route, classify
from tensorfusion.domain.admission.label_selector import SelectorError, selector_matches
from tensorfusion.domain.admission.native_resources import (
    DEFAULT_NATIVE_RESOURCES,
    has_native_gpus,
)
from tensorfusion.domain.annotations import KEYS

from .admission_builders import P, make_pod, native_container, resources_ok

Run = Callable[..., AdmissionDecision]
NATIVE = [native_container("a", 1)]


def route(pod: dict[str, Any], **kwargs: Any) -> Route:
    options: dict[str, Any] = {
        "namespace": "default",
        "native_resources": DEFAULT_NATIVE_RESOURCES,
        "auto_migration": None,
        "namespace_labels": None,
        "progressive_migration": False,
        "keys": KEYS,
    }
    options.update(kwargs)
    return classify(pod, **options).route


def test_enabled_label_goes_to_the_tf_pipeline() -> None:
    assert route(make_pod(resources_ok())) is Route.TF


@pytest.mark.parametrize("label", [None, "false", "yes"])
def test_pod_without_native_gpus_is_untouched(run: Run, label: str | None) -> None:
    pod = make_pod(enabled=None, labels={P + "enabled": label} if label else None)
    assert route(pod, progressive_migration=True) is Route.UNTOUCHED
    decision = run(pod, progressive_migration=True, auto_migration={"enable": True})
    assert decision.outcome is Outcome.UNTOUCHED and decision.patch == ()


def test_native_pod_without_migration_is_untouched() -> None:
    assert route(make_pod(enabled=None, containers=NATIVE)) is Route.UNTOUCHED


def test_auto_migration_selects_unlabelled_native_pod() -> None:
    pod = make_pod(enabled=None, containers=NATIVE)
    assert route(pod, auto_migration={"enable": True}) is Route.MIGRATE


def test_auto_migration_skips_opted_out_pod() -> None:
    pod = make_pod(enabled=False, containers=NATIVE)
    assert route(pod, auto_migration={"enable": True}) is Route.UNTOUCHED
    assert route(pod, auto_migration={"enable": True}, progressive_migration=True) is (
        Route.PROGRESSIVE
    )


def test_progressive_without_scheduler_name_adds_it(run: Run) -> None:
    pod = make_pod(enabled=None, containers=NATIVE)
    del pod["spec"]["schedulerName"]
    decision = run(pod, progressive_migration=True)
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "tensor-fusion-scheduler"}
    ]


def test_progressive_pod_already_on_our_scheduler_is_untouched(run: Run) -> None:
    pod = make_pod(
        enabled=None, containers=NATIVE, spec={"schedulerName": "tensor-fusion-scheduler"}
    )
    decision = run(pod, progressive_migration=True)
    assert decision.outcome is Outcome.UNTOUCHED and not decision.warnings


def test_native_gpus_in_requests_or_init_containers_count() -> None:
    in_requests = {"name": "a", "resources": {"requests": {"amd.com/gpu": "1"}}}
    assert has_native_gpus(make_pod(containers=[in_requests]), DEFAULT_NATIVE_RESOURCES)
    init = make_pod(spec={"initContainers": NATIVE})
    assert has_native_gpus(init, DEFAULT_NATIVE_RESOURCES)
    zero = make_pod(containers=[native_container("a", "0")])
    assert not has_native_gpus(zero, DEFAULT_NATIVE_RESOURCES)


RULE_NS = {"namespaceNames": ["team-a"]}
RULE_POD = {"podSelector": {"matchLabels": {"app": "train"}}}
RULE_NS_SELECTOR = {"namespaceSelector": {"matchLabels": {"gpu": "yes"}}}


@pytest.mark.parametrize(
    ("scope", "namespace", "labels", "namespace_labels", "expected"),
    [
        (None, "default", {}, None, True),
        ({"includes": [RULE_NS]}, "team-a", {}, None, True),
        ({"includes": [RULE_NS]}, "team-b", {}, None, False),
        ({"includes": [RULE_POD]}, "x", {"app": "train"}, None, True),
        ({"includes": [RULE_NS_SELECTOR]}, "x", {}, {"gpu": "yes"}, True),
        ({"includes": [RULE_NS_SELECTOR]}, "x", {}, {"gpu": "no"}, False),
        ({"excludes": [RULE_NS]}, "team-a", {}, None, False),
        ({"excludes": [RULE_NS]}, "team-b", {}, None, True),
        ({"excludes": [RULE_POD], "includes": [RULE_NS]}, "team-a", {"app": "train"}, None, False),
    ],
)
def test_auto_migration_scope(
    scope: dict[str, Any] | None,
    namespace: str,
    labels: dict[str, str],
    namespace_labels: dict[str, str] | None,
    expected: bool,
) -> None:
    config: dict[str, Any] = {"enable": True}
    if scope is not None:
        config["scope"] = scope
    pod = make_pod(enabled=None, labels=labels, containers=NATIVE)
    selected, warnings = auto_migration_selects(pod, namespace, config, namespace_labels)
    assert selected is expected
    assert warnings == []


@pytest.mark.parametrize(
    ("rule", "namespace_labels"),
    [
        (RULE_NS_SELECTOR, None),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, {}),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, {}),
    ],
)
def test_rule_errors_mean_not_migrated_with_a_warning(
    run: Run, rule: dict[str, Any], namespace_labels: dict[str, str] | None
) -> None:
    config = {"enable": True, "scope": {"includes": [rule]}}
    pod = make_pod(enabled=None, containers=NATIVE)
    selected, warnings = auto_migration_selects(pod, "x", config, namespace_labels)
    assert not selected and warnings
    decision = run(pod, auto_migration=config, namespace_labels=namespace_labels)
    assert decision.outcome is Outcome.UNTOUCHED
    assert any("auto-migration rule error" in warning for warning in decision.warnings)


def test_auto_migration_disabled() -> None:
    pod = make_pod(enabled=None, containers=NATIVE)
    assert auto_migration_selects(pod, "x", {"enable": False}, None) == (False, [])
    assert auto_migration_selects(pod, "x", None, None) == (False, [])


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
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_selector_matches(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


def test_selector_errors() -> None:
    with pytest.raises(SelectorError):
        selector_matches(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, {}
        )
    with pytest.raises(SelectorError):
        selector_matches({"matchLabels": ["a"]}, {})
