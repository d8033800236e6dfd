"""Bounds of the template engine: nesting, printf width and precision, work and output size.

Go's `text/template` bounds only parenthesized nesting (10,000 levels); our parser and
executor recurse in Python (recursion limit ~1,000 frames, up to 6 frames a level), so
nesting of `if`/`with`/`range`/`else if` and parentheses together is bounded far tighter.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "GO_FMT_MAX_WIDTH",
    "MAX_NESTING_DEPTH",
    "MAX_RENDER_CHARS",
    "MAX_RENDER_STEPS",
    "TRUNCATION_MARKER",
    "TemplateLimitError",
    "cut_text",
]

MAX_NESTING_DEPTH: Final = 100
"""Nested blocks (`if`, `with`, `range`, each `else if`/`else with`) and parentheses, together."""

GO_FMT_MAX_WIDTH: Final = 1_000_000
"""Go fmt's `tooLarge` bound on a width or precision (literal digits stop past it)."""

MAX_RENDER_CHARS: Final = 1_048_576
"""Characters of one printf/print result and of one uncut template output."""

MAX_RENDER_STEPS: Final = 10_000
"""Actions, function calls and range iterations of one render."""

TRUNCATION_MARKER: Final = "…[truncated]"
"""Ends a rendered text cut to its field's length."""


class TemplateLimitError(ValueError):
    """A template went past one of the bounds above; the message names the limit."""


def cut_text(text: str, max_chars: int) -> str:
    """`text` when it fits in `max_chars`, otherwise its head and the marker in `max_chars`."""
    if len(text) <= max_chars:
        return text
    return text[: max(max_chars - len(TRUNCATION_MARKER), 0)] + TRUNCATION_MARKER
