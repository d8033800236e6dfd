"""Rewrites the "Tables" section of docs/metrics.md from the schema (`make metrics-doc`);
tests/unit/metrics/test_metrics_doc.py fails while the two differ."""

from __future__ import annotations

import sys
from pathlib import Path

from tensorfusion.domain.metrics.schema import tables_markdown

BEGIN = "<!-- tables: generated from tensorfusion.domain.metrics.schema by `make metrics-doc` -->"
END = "<!-- end of tables -->"


def with_tables(text: str) -> str:
    """`text` with the part between the markers replaced by the generated tables."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{tables_markdown()}\n{END}{tail}"


if __name__ == "__main__":
    doc = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/metrics.md")
    doc.write_text(with_tables(doc.read_text()))
