"""Shared pieces of the dashboards: the dashboard shell, variables and panel builders.

Every panel reads the data source of the `datasource` variable (type `mysql`: GreptimeDB speaks
MySQL), carries an id unique within its dashboard, and takes its SQL from `dashboards.queries`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Final

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models

from dashboards.queries import query
from dashboards.sql_target import DATASOURCE, DATASOURCE_VARIABLE, SQLTarget

__all__ = [
    "TAG",
    "PanelIds",
    "filter_variable",
    "new_dashboard",
    "row",
    "stat_panel",
    "table_panel",
    "timeseries_panel",
]

TAG: Final = "tensor-fusion"
"""Every dashboard's tag; the dashboards' link menu lists the dashboards with it."""
_REF_IDS: Final = "ABCDEFGH"


class PanelIds:
    """Panel ids 1, 2, ... of one dashboard."""

    def __init__(self) -> None:
        self._next: Iterator[int] = itertools.count(1)

    def take(self) -> int:
        """The next id."""
        return next(self._next)


def _datasource_variable() -> dashboard.DatasourceVariable:
    return (
        dashboard.DatasourceVariable(DATASOURCE_VARIABLE)
        .label("GreptimeDB (MySQL)")
        .description("A MySQL data source pointed at GreptimeDB's MySQL port (4002).")
        .type("mysql")
    )


def filter_variable(name: str, label: str) -> dashboard.QueryVariable:
    """A multi-value variable with All, listed by the query `variable.<name>` over the range."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query(f"variable.{name}").sql)
        .multi(True)
        .include_all(True)
        .current(dashboard_models.VariableOption(selected=True, text="All", value="$__all"))
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
    )


def new_dashboard(
    uid: str, title: str, description: str, filters: Sequence[dashboard.QueryVariable]
) -> dashboard.Dashboard:
    """A dashboard with the data source variable, then `filters`, and links to the others."""
    board = (
        dashboard.Dashboard(f"TensorFusion / {title}")
        .uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .with_variable(_datasource_variable())
        .link(
            dashboard.DashboardLink("TensorFusion")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in filters:
        board = board.with_variable(variable)
    return board


def _targets(keys: Sequence[str]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    return [SQLTarget(query(key), _REF_IDS[index]) for index, key in enumerate(keys)]


def row(ids: PanelIds, title: str) -> dashboard.Row:
    """A row heading; the panels added after it sit below it."""
    return dashboard.Row(title).id(ids.take())


def stat_panel(
    ids: PanelIds,
    title: str,
    key: str,
    *,
    unit: str = "none",
    description: str = "",
    span: int = 4,
) -> stat.Panel:
    """A single number: the query's one value."""
    panel = (
        stat.Panel()
        .id(ids.take())
        .title(title)
        .datasource(DATASOURCE)
        .targets(_targets([key]))
        .unit(unit)
        .height(4)
        .span(span)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    return panel.description(description) if description else panel


def table_panel(
    ids: PanelIds, title: str, key: str, *, description: str = "", height: int = 8
) -> table.Panel:
    """The query's rows as they come."""
    panel = (
        table.Panel()
        .id(ids.take())
        .title(title)
        .datasource(DATASOURCE)
        .targets(_targets([key]))
        .height(height)
        .span(24)
    )
    return panel.description(description) if description else panel


def timeseries_panel(
    ids: PanelIds,
    title: str,
    keys: Sequence[str],
    *,
    unit: str,
    description: str = "",
    span: int = 12,
) -> timeseries.Panel:
    """One line per series of the time-series queries `keys` (targets A, B, ...)."""
    panel = (
        timeseries.Panel()
        .id(ids.take())
        .title(title)
        .datasource(DATASOURCE)
        .targets(_targets(keys))
        .unit(unit)
        .height(8)
        .span(span)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
    )
    return panel.description(description) if description else panel
