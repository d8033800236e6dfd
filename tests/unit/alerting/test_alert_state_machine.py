"""The per-rule state machine (alerting.md §4.2-§4.3, §5, §7.3)."""

from __future__ import annotations

from typing import Any

from tensorfusion.domain.alerting.rules import AlertRule, load_rules
from tensorfusion.domain.alerting.state import RuleState, firing_ends_at


def _rule(count: int = 2, **extra: Any) -> AlertRule:
    raw: dict[str, Any] = {
        "name": "Hot",
        "query": "SELECT 1",
        "evaluationInterval": "30s",
        "consecutiveCount": count,
        "severity": "P1",
        "summary": '{{ .node }} at {{ printf "%.1f" .t }}',
        "alertTargetInstance": "{{ .uuid }}",
        "runbookURL": "https://r",
    }
    raw.update(extra)
    return load_rules([raw]).rules[0]


ROW = {"node": "node-a", "uuid": "gpu-1", "t": 91.26, "count": 3, "ok": True, "": "x"}


def test_pending_then_firing_then_resent_then_resolved() -> None:
    rule, state = _rule(), RuleState()
    first = state.evaluate(rule, [ROW], 1_000)
    assert first.notices == () and not first.firing_changed
    assert state.pending()[0].count == 1
    second = state.evaluate(rule, [ROW], 31_000)
    assert second.firing_changed and len(second.notices) == 1
    notice = second.notices[0]
    assert not notice.resolved
    assert notice.starts_at_ms == 1_000
    assert notice.ends_at_ms == 31_000 + 4 * 60_000
    assert notice.labels == {
        "alertname": "Hot",
        "severity": "P1",
        "job": "tensor-fusion",
        "instance": "gpu-1",
        "node": "node-a",
        "uuid": "gpu-1",
    }
    assert notice.annotations == {
        "summary": "node-a at 91.3",
        "description": "",
        "runbook_url": "https://r",
    }
    payload = notice.payload()
    assert payload["startsAt"] == "1970-01-01T00:00:01.000Z"
    third = state.evaluate(rule, [dict(ROW, t=95.0)], 61_000)
    assert len(third.notices) == 1 and not third.firing_changed
    assert third.notices[0].annotations["summary"] == "node-a at 95.0"
    resolved = state.evaluate(rule, [], 91_000)
    assert resolved.firing_changed
    assert resolved.notices[0].resolved and resolved.notices[0].ends_at_ms == 91_000
    assert state.entries == {}


def test_a_missing_row_resets_a_pending_count() -> None:
    rule, state = _rule(count=3), RuleState()
    state.evaluate(rule, [ROW], 0)
    state.evaluate(rule, [ROW], 1)
    assert state.evaluate(rule, [], 2).notices == ()
    assert state.entries == {}


def test_duplicate_rows_count_once_and_truncation_resolves_nothing() -> None:
    rule, state = _rule(count=1), RuleState()
    outcome = state.evaluate(rule, [ROW, dict(ROW, t=1.0)], 0)
    assert outcome.rows_seen == 1 and len(outcome.notices) == 1
    other = dict(ROW, uuid="gpu-2")
    assert state.evaluate(rule, [other], 1, truncated=True).notices[0].labels["uuid"] == "gpu-2"
    assert len(state.firing()) == 2


def test_a_failing_template_skips_the_row() -> None:
    rule, state = _rule(count=1, summary="{{ if gt .node 3 }}x{{ end }}"), RuleState()
    outcome = state.evaluate(rule, [ROW], 0)
    assert outcome.notices == () and "incompatible types" in outcome.row_errors[0]


def test_firing_ends_at_uses_the_longer_of_interval_and_a_minute() -> None:
    assert firing_ends_at(_rule(evaluationInterval="5m"), 0) == 4 * 300_000


def test_restore_and_resolve_all() -> None:
    rule, state = _rule(count=3), RuleState()
    state.restore(
        rule,
        [
            {
                "rule": "Hot",
                "fingerprint": "f",
                "labels": {"a": "b"},
                "annotations": {"summary": "s"},
                "startsAt": 5,
                "lastSentAt": 6,
            }
        ],
    )
    entry = state.firing()[0]
    assert entry.count == 3 and entry.starts_at_ms == 5
    notices = state.resolve_all("Hot", 100)
    assert notices[0].resolved and notices[0].ends_at_ms == 100 and state.entries == {}


def test_only_text_columns_become_labels() -> None:
    rule, state = _rule(count=1), RuleState()
    row = ROW | {"alertname": "x", "bad-name": "y", "newline\n": "z", "digit\u0663": "w"}
    labels = state.evaluate(rule, [row], 0).notices[0].labels
    assert "count" not in labels and "ok" not in labels and "t" not in labels
    assert labels["alertname"] == "Hot" and "bad-name" not in labels
    assert "newline\n" not in labels and "digit\u0663" not in labels
