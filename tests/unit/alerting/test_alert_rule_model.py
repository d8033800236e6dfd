"""Rule validation (alerting.md §1, §2.1), durations and `{{ .Conditions }}` expansion."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tensorfusion.domain.alerting.durations import parse_rule_interval
from tensorfusion.domain.alerting.read_query import (
    RUST_WHITESPACE,
    ReadQueryError,
    check_read_query,
)
from tensorfusion.domain.alerting.rules import load_rules
from tensorfusion.domain.durations import DurationError
from tensorfusion.domain.metrics.conditions import Dialect, simulated_conditions, wall_conditions


def _rule(**overrides: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": "R",
        "query": "SELECT 1 AS x WHERE {{ .Conditions }}",
        "evaluationInterval": "30s",
        "severity": "P1",
    }
    rule.update(overrides)
    return rule


@pytest.mark.parametrize(
    ("text", "ms"),
    [("15s", 15_000), ("2m", 120_000), ("1m30s", 90_000), ("500ms", 500), ("1h", 3_600_000)],
)
def test_intervals(text: str, ms: int) -> None:
    assert parse_rule_interval(text) == ms


@pytest.mark.parametrize(
    "text", ["1.5h", "10ns", "5us", "", "-1s", "30", "1 m", 30, "30s\n", "\u0663s", "\uff13\uff10s"]
)
def test_bad_intervals(text: object) -> None:
    with pytest.raises(DurationError, match="whole numbers"):
        parse_rule_interval(text)


def test_keys_are_case_insensitive_and_unknown_keys_warn() -> None:
    rules = load_rules([_rule(runbookUrl="https://r", Threshold=80, colour="red")])
    assert not rules.problems
    rule = rules.rules[0]
    assert rule.runbook_url == "https://r" and rule.threshold == 80.0
    assert any("unknown key 'colour'" in warning for warning in rules.warnings)


@pytest.mark.parametrize(
    ("table", "interval", "warned"),
    [("tf_gpu_usage", "10s", True), ("tf_worker_usage", "15s", True),
     ("tf_gpu_usage", "30s", False), ("tf_node_metrics", "10s", False)],
)  # fmt: skip
def test_a_window_shorter_than_two_agent_samples_warns(
    table: str, interval: str, warned: bool
) -> None:
    """Found on `dev up`: a rule every 10s over the agents' 10s samples never fired."""
    query = f"SELECT node FROM {table} WHERE {{{{ .Conditions }}}}"
    rules = load_rules([_rule(query=query, evaluationInterval=interval)])
    assert rules.rules and not rules.problems
    warnings = [w for w in rules.warnings if "sampling interval" in w]
    assert bool(warnings) is warned, rules.warnings
    if warned:
        assert f"evaluationInterval {interval}" in warnings[0] and table in warnings[0]


def test_defaults() -> None:
    rule = load_rules([_rule()]).rules[0]
    assert (rule.threshold, rule.consecutive_count, rule.test_mode) == (0.0, 1, False)
    assert rule.summary.render({}) == "" and rule.runbook_url == ""
    zero = load_rules([_rule(consecutiveCount=0)]).rules[0]
    assert zero.effective_count == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": ""}, "field name is empty"),
        ({"query": "SELECT {{ .x "}, "field query does not parse"),
        ({"summary": "{{ if }}"}, "field summary does not parse"),
        ({"evaluationInterval": "1.5h"}, "field evaluationInterval"),
        ({"evaluationInterval": "500ms"}, "below the minimum of 1s"),
        ({"consecutiveCount": -1}, "consecutiveCount: -1 is not an integer"),
        ({"consecutiveCount": 1.5}, "consecutiveCount"),
        ({"threshold": "high"}, "threshold: 'high' is not a number"),
        ({"severity": " "}, "field severity is empty"),
        ({"testMode": "yes"}, "testMode"),
    ],
)
def test_a_bad_rule_is_rejected_alone(overrides: dict[str, Any], message: str) -> None:
    rules = load_rules([_rule(name="Good"), {**_rule(name="Bad"), **overrides}])
    assert [rule.name for rule in rules.rules] == ["Good"]
    assert len(rules.problems) == 1
    assert message in str(rules.problems[0])
    assert str(rules.problems[0]).startswith("alert rule #2")


@pytest.mark.parametrize(
    "field", ["name", "query", "severity", "summary", "description", "alertTargetInstance"]
)
def test_text_that_utf8_cannot_encode_is_rejected_naming_rule_field_and_character(
    field: str,
) -> None:
    # PyYAML reads "\ud800" in a double-quoted scalar as a lone surrogate; JSON cannot carry it.
    bad = yaml.safe_load(f'{field}: "SELECT 1 AS x \\ud800 -- x"')[field]
    rules = load_rules([_rule(name="Good"), {**_rule(name="Bad"), field: bad}])
    assert [rule.name for rule in rules.rules] == ["Good"]
    label = (
        "alert rule #2 (SELECT 1 AS x \\ud800 -- x)" if field == "name" else "alert rule #2 (Bad)"
    )
    assert str(rules.problems[0]) == (
        f"{label}: field {field}: character U+D800 at position 15 cannot be "
        "encoded as UTF-8 (a lone surrogate, e.g. from a YAML \\u escape); only valid Unicode "
        "text is allowed"
    )
    assert rules.problems[0].name.encode("utf-8")  # printable in status output


def test_duplicate_names_keep_the_first() -> None:
    rules = load_rules([_rule(), _rule(severity="P2")])
    assert [rule.severity for rule in rules.rules] == ["P1"]
    assert "used by an earlier rule" in str(rules.problems[0])


def test_not_a_list() -> None:
    assert "not a list" in str(load_rules({"a": 1}).problems[0])


def test_query_rendering_and_condition_forms() -> None:
    rule = load_rules(
        [
            _rule(
                query="SELECT x > {{ .Threshold }} AND {{ .Conditions }} -- {{ .Name }}",
                threshold=97,
            )
        ]
    ).rules[0]
    assert rule.render_query("C") == "SELECT x > 97 AND C -- R"
    assert wall_conditions(Dialect.GREPTIME, "30s", 30_000) == "ts >= now() - '30s'::INTERVAL"
    assert (
        wall_conditions(Dialect.DUCKDB, "30s", 30_000)
        == "ts >= (now() AT TIME ZONE 'UTC') - INTERVAL '30000 milliseconds'"
    )
    now = 1787220000000  # 2026-08-20T10:00:00Z
    assert simulated_conditions(now, 30_000) == (
        "(ts >= TIMESTAMP '2026-08-20 09:59:30.000' AND ts <= TIMESTAMP '2026-08-20 10:00:00.000')"
    )


def test_rules_calling_now_are_flagged() -> None:
    rule = load_rules([_rule(query="SELECT 1 WHERE ts > now() - INTERVAL 1 MINUTE")]).rules[0]
    assert rule.calls_now


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1 AS x WHERE {{ .Conditions }};",
        "SELECT ';' AS x, 'it''s; fine' AS y WHERE {{ .Conditions }} -- a; comment",
        'SELECT "a;b" FROM t /* ; */ WHERE {{ .Conditions }}',
        "WITH w (n) AS (SELECT 1), v AS (SELECT 2) SELECT * FROM w, v WHERE {{ .Conditions }}",
        "(SELECT 1) UNION ALL (SELECT 2)",
    ],
)
def test_one_select_statement_is_a_valid_query(query: str) -> None:
    rules = load_rules([_rule(query=query)])
    assert not rules.problems, rules.problems


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "SELECT 1; DELETE FROM tf_gpu_usage",
            "field query holds 2 statements; the second begins 'DELETE FROM tf_gpu_usage'",
        ),
        ("SELECT 1 WHERE {{ .Conditions }}; DROP TABLE t;", "the second begins 'DROP TABLE t;'"),
        (
            "DELETE FROM tf_gpu_usage",
            "must be one SELECT (or WITH ... SELECT) statement, not DELETE",
        ),
        ("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a", "statement, not INSERT"),
        ("SELECT * INTO copy FROM tf_gpu_usage", "SELECT ... INTO"),
        # Backslashes escape quotes in GreptimeDB's MySQL dialect but not in DuckDB.
        ("SELECT 'a\\'; DELETE FROM t; -- '", 'the second begins "DELETE FROM t; -- \'"'),
        (
            "SELECT 'x\\'' ; DELETE FROM t; -- '",
            "holds 2 statements (reading the text with: backslash escapes); "
            'the second begins "DELETE FROM t; -- \'"',
        ),
        ("SELECT 1 # ; DELETE FROM t", "the second begins 'DELETE FROM t'"),
        ("SELECT 1 --x; DELETE FROM t", "(reading the text with: dash needs space)"),
        ("SELECT $$';$$; DELETE FROM t", "unterminated string literal"),
        ("SELECT 1 /*! ; DELETE FROM t */", "(reading the text with: executable comments)"),
        ("SELECT 'unclosed", "unterminated string literal (') at character 8"),
        ("{{ if .Conditions }}{{ end }}", "field query is empty"),
        ("SELECT {{ index .Name 5 }}", "field query does not render"),
    ],
)
def test_a_query_must_be_exactly_one_select_statement(query: str, message: str) -> None:
    rules = load_rules([_rule(name="Good"), _rule(name="Evil", query=query)])
    assert [rule.name for rule in rules.rules] == ["Good"]
    assert str(rules.problems[0]).startswith("alert rule #2 (Evil): field query ")
    assert message in str(rules.problems[0])


def test_rust_whitespace_is_the_unicode_white_space_set() -> None:
    # Rust's char::is_whitespace (GreptimeDB's sqlparser decides `--` comments with it);
    # Python's isspace also takes U+001C-U+001F.
    expected = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)}
    expected |= {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
    assert {ord(char) for char in RUST_WHITESPACE} == expected
    python = {code for code in range(0x110000) if chr(code).isspace()}
    assert python - expected == {0x1C, 0x1D, 0x1E, 0x1F}


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_dash_dash_before_a_python_only_space_is_not_a_comment_for_greptime(
    separator: str,
) -> None:
    # sqlparser (MySQL dialect) reads `--\x1c` as two minus signs, so the `;` separates.
    with pytest.raises(ReadQueryError, match=r"holds 2 statements .*dash needs space"):
        check_read_query(f"SELECT 1 --{separator}; DELETE FROM tf_gpu_usage")


@pytest.mark.parametrize("separator", ["\t", "\x0b", "\x85", "\u3000"])
def test_dash_dash_before_rust_whitespace_is_a_comment_in_every_reading(separator: str) -> None:
    check_read_query(f"SELECT 1 --{separator}; DELETE FROM tf_gpu_usage")
