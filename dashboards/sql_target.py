"""A raw-SQL query of Grafana's MySQL data source as an SDK data query.

The SDK ships no MySQL query type; a data query is any `cogvariants.Dataquery` with `to_json`
and a builder is any `cogbuilder.Builder` of one (the SDK's extension point for query types).
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from dashboards.queries import Query

__all__ = ["DATASOURCE", "DATASOURCE_VARIABLE", "SQLTarget"]

DATASOURCE_VARIABLE: Final = "datasource"
DATASOURCE: Final = DataSourceRef(type_val="mysql", uid="${" + DATASOURCE_VARIABLE + "}")
"""Every panel and target reads the data source the dashboard's variable selects."""


class SQLQuery(cogvariants.Dataquery):
    """A raw SQL target (`rawSql` in code mode) as Grafana's SQL data sources store it."""

    def __init__(self, query: Query, ref_id: str) -> None:
        self.query = query
        self.ref_id = ref_id

    def to_json(self) -> dict[str, object]:
        """The target as dashboard JSON."""
        return {
            "datasource": DATASOURCE.to_json(),
            "editorMode": "code",
            "format": self.query.format.value,
            "rawQuery": True,
            "rawSql": self.query.sql,
            "refId": self.ref_id,
        }


class SQLTarget(cogbuilder.Builder[cogvariants.Dataquery]):
    """Builder of one SQL target."""

    def __init__(self, query: Query, ref_id: str = "A") -> None:
        self._query = SQLQuery(query, ref_id)

    def build(self) -> cogvariants.Dataquery:
        """The target."""
        return self._query
