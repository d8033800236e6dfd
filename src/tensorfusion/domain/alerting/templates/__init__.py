"""Go `text/template` semantics for alert rule fields, behind one small interface.

`compile_template(source)` parses once (a syntax error is a `TemplateSyntaxError` naming line
and column); `GoTemplate.render(data)` executes over a mapping and returns the text, raising
`TemplateExecutionError` when execution fails. Values print as Go's `fmt` prints them.
The bounds on nesting, printf, work and output are in `limits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.alerting.templates.executor import (
    FUNCTION_NAMES,
    TemplateExecutionError,
    execute,
)
from tensorfusion.domain.alerting.templates.goformat import go_sprintf, go_value_text
from tensorfusion.domain.alerting.templates.lexer import TemplateSyntaxError
from tensorfusion.domain.alerting.templates.limits import (
    MAX_NESTING_DEPTH,
    MAX_RENDER_CHARS,
    MAX_RENDER_STEPS,
    TRUNCATION_MARKER,
)
from tensorfusion.domain.alerting.templates.nodes import ListNode, TextNode
from tensorfusion.domain.alerting.templates.parser import parse

__all__ = [
    "MAX_NESTING_DEPTH",
    "MAX_RENDER_CHARS",
    "MAX_RENDER_STEPS",
    "TRUNCATION_MARKER",
    "GoTemplate",
    "TemplateExecutionError",
    "TemplateSyntaxError",
    "compile_template",
    "go_sprintf",
    "go_value_text",
]


@dataclass(frozen=True, slots=True)
class GoTemplate:
    """A parsed template; `render` is pure and thread-safe.

    `max_chars` cuts longer output with TRUNCATION_MARKER; None leaves output uncut (up to
    MAX_RENDER_CHARS, past which rendering fails).
    """

    source: str
    tree: ListNode
    max_chars: int | None = None

    @property
    def is_constant(self) -> bool:
        """True when the template has no actions (its output is its source)."""
        return all(isinstance(node, TextNode) for node in self.tree.nodes)

    def render(self, data: Mapping[str, Any]) -> str:
        """Execute over `data`; raises TemplateExecutionError on a failing action."""
        if not self.tree.nodes:
            return ""
        return execute(self.tree, data, max_chars=self.max_chars)


def compile_template(source: str, *, max_chars: int | None = None) -> GoTemplate:
    """Parse Go template text; raises TemplateSyntaxError with line:column."""
    return GoTemplate(source, parse(source, FUNCTION_NAMES), max_chars)
