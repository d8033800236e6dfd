"""Go `text/template` semantics for alert rule fields, behind one small interface.

`compile_template(source)` parses once (a syntax error is a `TemplateSyntaxError` naming line
and column); `GoTemplate.render(data)` executes over a mapping and returns the text, raising
`TemplateExecutionError` when execution fails. Values print as Go's `fmt` prints them.
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
from tensorfusion.domain.alerting.templates.nodes import ListNode, TextNode
from tensorfusion.domain.alerting.templates.parser import parse

__all__ = [
    "GoTemplate",
    "TemplateExecutionError",
    "TemplateSyntaxError",
    "compile_template",
    "go_sprintf",
    "go_value_text",
]


@dataclass(frozen=True, slots=True)
class GoTemplate:
    """A parsed template; `render` is pure and thread-safe."""

    source: str
    tree: ListNode

    @property
    def is_constant(self) -> bool:
        """True when the template has no actions (its output is its source)."""
        return all(isinstance(node, TextNode) for node in self.tree.nodes)

    def render(self, data: Mapping[str, Any]) -> str:
        """Execute over `data`; raises TemplateExecutionError on a failing action."""
        if not self.tree.nodes:
            return ""
        return execute(self.tree, data)


def compile_template(source: str) -> GoTemplate:
    """Parse Go template text; raises TemplateSyntaxError with line:column."""
    return GoTemplate(source, parse(source, FUNCTION_NAMES))
