"""The body of `GET /api/alerts` (alerting.md §9): one builder for the leader, a follower and
the standalone evaluator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tensorfusion.domain.alerting.rules import RuleSet

__all__ = ["alerts_body", "evaluation_status", "rules_status"]


def _not_evaluated() -> dict[str, Any]:
    return {"lastEvaluation": None, "lastDurationMs": None, "lastError": "",
            "pending": [], "firing": []}  # fmt: skip


def rules_status(
    rule_set: RuleSet, evaluated: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every rule with its validation result; a rule named in `evaluated` carries that state
    (`lastEvaluation`, `lastDurationMs`, `lastError`, `pending`, `firing`)."""
    progress = evaluated or {}
    rules = [
        {"name": rule.name, "evaluationInterval": rule.evaluation_interval, "valid": True,
         "error": "", **(progress.get(rule.name) or _not_evaluated())}
        for rule in rule_set.rules
    ]  # fmt: skip
    rules.extend(
        {"name": problem.name, "evaluationInterval": None, "valid": False,
         "error": str(problem), **_not_evaluated()}
        for problem in rule_set.problems
    )  # fmt: skip
    return rules


def evaluation_status(
    *,
    running: bool,
    kind: str,
    rules: list[dict[str, Any]],
    target: str = "",
    read_up: bool | None = None,
    write_up: bool | None = None,
    last_error: str = "",
) -> dict[str, Any]:
    """The `running`, `store` and `rules` parts (store health None: not evaluating)."""
    store = {"kind": kind, "target": target, "up": read_up and write_up, "readUp": read_up,
             "writeUp": write_up, "lastError": last_error}  # fmt: skip
    return {"running": running, "store": store, "rules": rules}


def alerts_body(
    evaluation: Mapping[str, Any],
    *,
    pod: str,
    leader: bool,
    alertmanagers: Sequence[Mapping[str, Any]],
    enabled: bool | None = None,
) -> dict[str, Any]:
    """The whole body: `evaluation_status` plus `alertmanagers`, `replica` and (in a controller
    replica) `enabled`."""
    body = {**evaluation, "alertmanagers": list(alertmanagers),
            "replica": {"pod": pod, "leader": leader}}  # fmt: skip
    if enabled is not None:
        body["enabled"] = enabled
    return body
