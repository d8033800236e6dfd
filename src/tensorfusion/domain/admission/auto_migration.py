"""Auto-migration scope of dynamic config `autoMigration` (admission.md §10).

Config shape: `{enable: bool, scope: {includes: [rule], excludes: [rule]}}`, a rule being
`{namespaceNames: [..], namespaceSelector: LabelSelector, podSelector: LabelSelector}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorfusion.domain.admission.label_selector import SelectorError, selector_matches

__all__ = ["auto_migration_enabled", "auto_migration_selects", "needs_namespace_labels"]


class _RuleError(ValueError):
    pass


def auto_migration_enabled(config: Mapping[str, Any] | None) -> bool:
    """True when `autoMigration.enable` is true."""
    return bool(config) and (config or {}).get("enable") is True


def _rules(config: Mapping[str, Any], name: str) -> list[Any]:
    scope = config.get("scope") or {}
    rules = scope.get(name) or [] if isinstance(scope, Mapping) else []
    return rules if isinstance(rules, list) else []


def needs_namespace_labels(config: Mapping[str, Any] | None) -> bool:
    """True when some rule has a `namespaceSelector` (the caller must read the Namespace)."""
    if not auto_migration_enabled(config):
        return False
    assert config is not None
    return any(
        isinstance(rule, Mapping) and rule.get("namespaceSelector") is not None
        for name in ("includes", "excludes")
        for rule in _rules(config, name)
    )


def _rule_matches(
    rule: Any,
    namespace: str,
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None,
) -> bool:
    if not isinstance(rule, Mapping):
        raise _RuleError("a scope rule must be an object")
    names = rule.get("namespaceNames") or []
    if namespace in names:
        return True
    try:
        pod_selector = rule.get("podSelector")
        if pod_selector is not None and selector_matches(pod_selector, pod_labels):
            return True
        namespace_selector = rule.get("namespaceSelector")
        if namespace_selector is not None:
            if namespace_labels is None:
                raise _RuleError(f'namespace "{namespace}" could not be read')
            return selector_matches(namespace_selector, namespace_labels)
    except SelectorError as error:
        raise _RuleError(f"invalid selector: {error}") from None
    return False


def auto_migration_selects(
    pod: Mapping[str, Any],
    namespace: str,
    config: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, str] | None,
) -> tuple[bool, list[str]]:
    """Whether auto-migration converts this native-GPU pod; rule errors mean "no", with a warning.

    Without `scope` every pod migrates. Excludes are checked first; then, when includes are
    given, the pod must match one of them.
    """
    if not auto_migration_enabled(config):
        return False, []
    assert config is not None
    if not config.get("scope"):
        return True, []
    pod_labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        if any(
            _rule_matches(rule, namespace, pod_labels, namespace_labels)
            for rule in _rules(config, "excludes")
        ):
            return False, []
        includes = _rules(config, "includes")
        if includes and not any(
            _rule_matches(rule, namespace, pod_labels, namespace_labels) for rule in includes
        ):
            return False, []
    except _RuleError as error:
        return False, [f"auto-migration rule error, pod not migrated: {error}"]
    return True, []
