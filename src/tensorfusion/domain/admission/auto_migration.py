"""Auto-migration scope of dynamic config `autoMigration` (admission.md §10).

Config shape: `{enable: bool, scope: {includes: RULES, excludes: RULES}}`, where RULES is one
rule object or a list of them, a rule being `{namespaceNames: [..], namespaceSelector:
LabelSelector, podSelector: LabelSelector}`. `read_auto_migration` reads it once into an
`AutoMigrationConfig`; a malformed scope is kept as `error`, so no pod migrates and each
native-GPU pod gets a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tensorfusion.domain.label_selector import (
    SelectorError,
    parse_selector,
    selector_matches,
)
from tensorfusion.domain.model import LabelSelector
from tensorfusion.domain.model.errors import describe_value
from tensorfusion.domain.object_views import labels_of

__all__ = [
    "RULE_FIELDS",
    "AutoMigrationConfig",
    "ScopeRule",
    "auto_migration_selects",
    "read_auto_migration",
]

RULE_FIELDS: Final = ("namespaceNames", "namespaceSelector", "podSelector")
_SCOPE_FIELDS: Final = ("includes", "excludes")
_WHERE: Final = "autoMigration"
_RULES_RULE: Final = f"must be a rule object ({', '.join(RULE_FIELDS)}) or a list of rule objects"
_EMPTY_RULE: Final = (
    "an empty rule matches no pod; give namespaceNames (not empty), namespaceSelector or "
    "podSelector"
)


class _RuleError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ScopeRule:
    """One include or exclude rule: it matches when any of its parts matches."""

    namespace_names: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None

    def matches(
        self,
        namespace: str,
        pod_labels: Mapping[str, str],
        namespace_labels: Mapping[str, str] | None,
    ) -> bool:
        """Namespace name, then pod labels, then Namespace labels (which must have been read)."""
        if namespace in self.namespace_names:
            return True
        if self.pod_selector is not None and selector_matches(self.pod_selector, pod_labels):
            return True
        if self.namespace_selector is None:
            return False
        if namespace_labels is None:
            raise _RuleError(f'namespace "{namespace}" could not be read')
        return selector_matches(self.namespace_selector, namespace_labels)


@dataclass(frozen=True, slots=True)
class AutoMigrationConfig:
    """`autoMigration`, read once. No rules = every native-GPU pod migrates.

    `error`: what is wrong with the config (field, value, what is allowed); while set, no pod
    migrates and each one that would be considered gets a warning. `enable_invalid`: `enable`
    itself is not a boolean (e.g. the string "true"), so the error is reported although
    migration reads as off.
    """

    enable: bool = False
    includes: tuple[ScopeRule, ...] = ()
    excludes: tuple[ScopeRule, ...] = ()
    error: str | None = None
    enable_invalid: bool = False

    @property
    def needs_namespace_labels(self) -> bool:
        """True when some rule has a `namespaceSelector` (the shell must read the Namespace)."""
        return (
            self.enable
            and self.error is None
            and any(
                rule.namespace_selector is not None for rule in (*self.includes, *self.excludes)
            )
        )

    def selects(
        self,
        pod_labels: Mapping[str, str],
        namespace: str,
        namespace_labels: Mapping[str, str] | None,
    ) -> tuple[bool, tuple[str, ...]]:
        """Whether a native-GPU pod migrates; rule errors mean "no", with a warning.

        Excludes are checked first; then, when includes are given, one must match.
        """
        if not self.enable and not self.enable_invalid:
            return False, ()
        if self.error is not None:
            return False, (_rule_warning(self.error),)
        try:
            if any(rule.matches(namespace, pod_labels, namespace_labels) for rule in self.excludes):
                return False, ()
            if self.includes and not any(
                rule.matches(namespace, pod_labels, namespace_labels) for rule in self.includes
            ):
                return False, ()
        except _RuleError as error:
            return False, (_rule_warning(str(error)),)
        return True, ()


def _rule_warning(error: str) -> str:
    return f"auto-migration rule error, pod not migrated: {error}"


def _invalid(where: str, value: Any, rule: str) -> str:
    return f"{where}: invalid value {describe_value(value)}: {rule}"


def _read_rule(value: Mapping[str, Any], where: str, problems: list[str]) -> ScopeRule:
    """One rule; a rule with nothing to match (`{namespaceNames: []}`) is an error too."""
    found = len(problems)
    problems.extend(
        f"{where}.{key}: unknown field (allowed: {', '.join(RULE_FIELDS)})"
        for key in value
        if key not in RULE_FIELDS
    )
    names = value.get("namespaceNames")
    if names is None:
        names = []
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        problems.append(_invalid(f"{where}.namespaceNames", names, "must be a list of names"))
        return ScopeRule()
    rule = ScopeRule(
        tuple(names),
        _read_selector(value.get("namespaceSelector"), f"{where}.namespaceSelector", problems),
        _read_selector(value.get("podSelector"), f"{where}.podSelector", problems),
    )
    if rule == ScopeRule() and len(problems) == found:
        problems.append(_invalid(where, value, _EMPTY_RULE))
    return rule


def _read_selector(value: Any, where: str, problems: list[str]) -> LabelSelector | None:
    if value is None:
        return None
    try:
        return parse_selector(value, where)
    except SelectorError as error:
        problems.append(str(error))
        return None


def _read_rules(value: Any, where: str, problems: list[str]) -> tuple[ScopeRule, ...]:
    """One rule object, a list of them, or nothing (absent, null or `{}`)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return ()
    if isinstance(value, Mapping):
        return (_read_rule(value, where, problems),)
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        problems.append(_invalid(where, value, _RULES_RULE))
        return ()
    return tuple(_read_rule(item, f"{where}[{i}]", problems) for i, item in enumerate(value))


def read_auto_migration(config: Any) -> AutoMigrationConfig:
    """Read dynamic config `autoMigration` (None or absent = disabled); never raises."""
    if config is None:
        return AutoMigrationConfig()
    if not isinstance(config, Mapping):
        return AutoMigrationConfig(
            error=_invalid(_WHERE, config, "must be an object with enable and scope")
        )
    problems: list[str] = []
    enable = config.get("enable")
    if enable is not None and not isinstance(enable, bool):
        problems.append(_invalid(f"{_WHERE}.enable", enable, "must be true or false"))
    scope = config.get("scope")
    if scope is None:
        scope = {}
    if not isinstance(scope, Mapping):
        problems.append(
            _invalid(f"{_WHERE}.scope", scope, "must be an object (includes, excludes)")
        )
        scope = {}
    problems.extend(
        f"{_WHERE}.scope.{key}: unknown field (allowed: {', '.join(_SCOPE_FIELDS)})"
        for key in scope
        if key not in _SCOPE_FIELDS
    )
    includes = _read_rules(scope.get("includes"), f"{_WHERE}.scope.includes", problems)
    excludes = _read_rules(scope.get("excludes"), f"{_WHERE}.scope.excludes", problems)
    return AutoMigrationConfig(
        enable=enable is True,
        includes=includes,
        excludes=excludes,
        error="; ".join(problems) or None,
        enable_invalid=enable is not None and not isinstance(enable, bool),
    )


def auto_migration_selects(
    pod: Mapping[str, Any],
    namespace: str,
    config: AutoMigrationConfig,
    namespace_labels: Mapping[str, str] | None,
) -> tuple[bool, tuple[str, ...]]:
    """`config.selects` for a pod: whether auto-migration converts it, and any warning."""
    labels = labels_of(pod)
    return config.selects(labels, namespace, namespace_labels)
