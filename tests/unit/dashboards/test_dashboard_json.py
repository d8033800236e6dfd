"""The committed dashboards (charts/tensor-fusion/dashboards/*.json) are the generator's output,
and each is well formed: unique ids, a SQL target on the `datasource` variable per panel, the
SQL taken from `dashboards.queries`, every query used, a grid without overlaps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dashboards.generate import BUILDERS, OUTPUT_DIR, render_all
from dashboards.queries import QUERIES, Format

DATASOURCE = {"type": "mysql", "uid": "${datasource}"}
RENDERED = render_all()
SQL_TO_KEY = {query.sql: key for key, query in QUERIES.items()}


def committed(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((OUTPUT_DIR / name).read_text(encoding="utf-8"))
    return loaded


def test_the_committed_json_is_the_generated_json() -> None:
    assert sorted(path.name for path in OUTPUT_DIR.glob("*.json")) == sorted(RENDERED)
    for name, text in RENDERED.items():
        assert (OUTPUT_DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run `make dashboards`"
        )


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_every_panel_has_an_id_and_sql_targets_on_the_datasource_variable(name: str) -> None:
    board = committed(name)
    panels = board["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    assert all(isinstance(panel_id, int) and panel_id > 0 for panel_id in ids)
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE
            key = SQL_TO_KEY.get(target["rawSql"])
            assert key is not None, f"{panel['title']}: SQL not from dashboards.queries"
            assert target["format"] == QUERIES[key].format.value
            assert (panel["type"] == "timeseries") == (QUERIES[key].format is Format.TIME_SERIES)


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_the_variables_are_the_mysql_datasource_and_tested_queries(name: str) -> None:
    variables = committed(name)["templating"]["list"]
    first = variables[0]
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "mysql")
    for variable in variables[1:]:
        assert variable["type"] == "query"
        assert variable["datasource"] == DATASOURCE
        assert variable["query"] == QUERIES[f"variable.{variable['name']}"].sql
        assert variable["multi"] and variable["includeAll"]


def test_every_query_is_used_and_uids_are_unique() -> None:
    used: set[str] = set()
    uids = []
    for name in RENDERED:
        board = committed(name)
        uids.append(board["uid"])
        for panel in board["panels"]:
            used |= {SQL_TO_KEY[target["rawSql"]] for target in panel.get("targets", [])}
        used |= {f"variable.{v['name']}" for v in board["templating"]["list"][1:]}
    assert used == set(QUERIES)
    assert len(uids) == len(set(uids)) == len(BUILDERS)


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_panels_fit_the_grid_without_overlapping(name: str) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in committed(name)["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{name}: {panel['title']} overlaps another panel"
        taken |= cells
