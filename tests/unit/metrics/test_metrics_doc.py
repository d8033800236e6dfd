"""docs/metrics.md's "Tables" section is the schema's: regenerate it with `make metrics-doc`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tensorfusion.domain.metrics.schema import TABLES, tables_markdown

ROOT = Path(__file__).resolve().parents[3]


def _script() -> object:
    spec = importlib.util.spec_from_file_location(
        "metrics_doc", ROOT / "scripts" / "metrics_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tables_section_matches_the_schema() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    regenerated = _script().with_tables(doc)  # type: ignore[attr-defined]
    assert doc == regenerated, "docs/metrics.md is not the schema's: run `make metrics-doc`"


def test_every_column_of_every_table_is_listed() -> None:
    text = tables_markdown()
    for schema in TABLES:
        assert f"### `{schema.name}`" in text
        for column in (*schema.tags, *(name for name, _ in schema.fields), schema.time_column):
            assert f"| `{column}` |" in text, (schema.name, column)
