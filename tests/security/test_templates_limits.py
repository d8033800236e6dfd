"""Hostile alert templates: printf widths, deep nesting, endless work and huge summaries are
bounded (issue 22, finding 3). Go's own answers for the printf bounds are golden cases in
tests/unit/alerting/golden (`bounds_*`)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tensorfusion.domain.alerting.rules import RENDERED_TEXT_LIMITS, load_rules
from tensorfusion.domain.alerting.state import RuleState
from tensorfusion.domain.alerting.templates import (
    MAX_NESTING_DEPTH,
    MAX_RENDER_CHARS,
    MAX_RENDER_STEPS,
    TRUNCATION_MARKER,
    TemplateExecutionError,
    TemplateSyntaxError,
    compile_template,
)

_MIB = 1024 * 1024


@contextmanager
def peak_memory(limit_bytes: int) -> Iterator[None]:
    """Fail when the block's peak Python allocation passes `limit_bytes`."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit_bytes, f"peak allocation {peak} bytes"


def render(source: str, **data: Any) -> str:
    return compile_template(source).render(data)


@pytest.mark.parametrize(
    ("source", "data", "expected"),
    [
        ('{{ printf "%0999999999d" 1 }}', {}, "%!(NOVERB)%!(EXTRA int=1)"),
        ('{{ printf "%.999999999f" 1.5 }}', {}, "%!(NOVERB)%!(EXTRA float64=1.5)"),
        ('{{ printf "%*d" .w 1 }}', {"w": 999_999_999}, "%!(BADWIDTH)1"),
        ('{{ printf "%-*d" .w 1 }}', {"w": -999_999_999}, "%!(BADWIDTH)1"),
        ('{{ printf "%.*d" .w 1 }}', {"w": 999_999_999}, "%!(BADPREC)1"),
        ('{{ printf "%.*f" .w 1.5 }}', {"w": 1_000_001}, "%!(BADPREC)1.500000"),
    ],
)
def test_printf_width_and_precision_past_go_bound_answer_as_go_in_little_memory(
    source: str, data: dict[str, Any], expected: str
) -> None:
    with peak_memory(4 * _MIB):
        assert render(source, **data) == expected


def test_a_width_go_accepts_but_past_the_output_limit_is_an_error_naming_the_limit() -> None:
    with peak_memory(4 * _MIB), pytest.raises(TemplateExecutionError, match=str(MAX_RENDER_CHARS)):
        render('{{ printf "%9999999d" 1 }}')
    with peak_memory(8 * _MIB), pytest.raises(TemplateExecutionError, match=str(MAX_RENDER_CHARS)):
        render('{{ $x := printf "%1000000d" 1 }}{{ print $x $x $x $x $x $x $x $x }}')


@pytest.mark.parametrize(
    "source",
    [
        "{{ range 1000000000 }}x{{ end }}",
        "{{ range 1000 }}{{ range 1000 }}{{ range 1000 }}{{ end }}{{ end }}{{ end }}",
    ],
)
def test_endless_ranges_stop_at_the_step_limit(source: str) -> None:
    with peak_memory(4 * _MIB), pytest.raises(TemplateExecutionError, match=str(MAX_RENDER_STEPS)):
        render(source)


def _nested_ifs(levels: int) -> str:
    return "{{ if 1 }}" * levels + "x" + "{{ end }}" * levels


def _nested_parens(levels: int) -> str:
    return "{{ " + "(" * levels + "1" + ")" * levels + " }}"


def _else_if_chain(levels: int) -> str:
    return "{{ if 0 }}" + "{{ else if 0 }}" * (levels - 1) + "{{ else }}x{{ end }}"


def _ranges_then_parens(levels: int) -> str:
    half = levels // 2
    rest = levels - half
    return (
        "{{ range 1 }}" * half
        + "{{ print "
        + "(print " * rest
        + "1"
        + ")" * rest
        + " }}"
        + ("{{ end }}" * half)
    )


_SHAPES: list[Callable[[int], str]] = [
    _nested_ifs,
    _nested_parens,
    _else_if_chain,
    _ranges_then_parens,
]


@pytest.mark.parametrize("shape", _SHAPES, ids=lambda shape: shape.__name__)
def test_deep_nesting_is_a_parse_error_naming_the_limit(shape: Callable[[int], str]) -> None:
    for levels in (MAX_NESTING_DEPTH + 1, 5000):
        with pytest.raises(TemplateSyntaxError, match=f"deeper than {MAX_NESTING_DEPTH} levels"):
            compile_template(shape(levels))


@pytest.mark.parametrize("shape", _SHAPES, ids=lambda shape: shape.__name__)
def test_nesting_at_the_limit_renders_from_a_deep_caller(shape: Callable[[int], str]) -> None:
    template = compile_template(shape(MAX_NESTING_DEPTH))

    def below(frames: int) -> str:
        return template.render({}) if frames == 0 else below(frames - 1)

    assert below(200) in ("x", "1")


def _rule(**fields: Any) -> dict[str, Any]:
    return {
        "name": "Big",
        "query": "SELECT 'node-a' AS node",
        "evaluationInterval": "10s",
        "severity": "P1",
        **fields,
    }


def test_a_megabyte_summary_and_description_are_cut_with_the_marker() -> None:
    rules = load_rules(
        [
            _rule(
                summary='{{ printf "%1000000s" .node }}',
                description='{{ range 3 }}{{ printf "%-9000s" "ab" }}{{ end }}',
                alertTargetInstance='{{ printf "%-5000s" .node }}',
            )
        ]
    )
    assert not rules.problems
    outcome = RuleState().evaluate(rules.rules[0], [{"node": "node-a"}], now_ms=1_000)
    assert not outcome.row_errors
    (notice,) = outcome.notices
    summary = notice.annotations["summary"]
    description = notice.annotations["description"]
    instance = notice.labels["instance"]
    assert len(summary) == RENDERED_TEXT_LIMITS["summary"] and summary.endswith(TRUNCATION_MARKER)
    assert len(description) == RENDERED_TEXT_LIMITS["description"]
    assert description.startswith("ab ") and description.endswith(TRUNCATION_MARKER)
    assert len(instance) == RENDERED_TEXT_LIMITS["alertTargetInstance"]
    assert instance.startswith("node-a ") and instance.endswith(TRUNCATION_MARKER)


def test_a_summary_within_its_limit_is_not_cut() -> None:
    limit = RENDERED_TEXT_LIMITS["summary"]
    template = compile_template('{{ printf "%*s" .w "x" }}', max_chars=limit)
    assert template.render({"w": limit}) == " " * (limit - 1) + "x"


def test_a_deeply_nested_rule_is_rejected_alone_naming_the_limit() -> None:
    rules = load_rules(
        [_rule(name="Deep", summary=_nested_ifs(3000)), _rule(name="Fine", summary="ok")]
    )
    assert [rule.name for rule in rules.rules] == ["Fine"]
    (problem,) = rules.problems
    assert "field summary does not parse" in str(problem)
    assert f"deeper than {MAX_NESTING_DEPTH} levels" in str(problem)


def test_a_bad_slice_index_is_a_template_error_not_a_crash() -> None:
    with pytest.raises(TemplateExecutionError, match="error calling slice"):
        render('{{ slice "abc" "x" }}')
