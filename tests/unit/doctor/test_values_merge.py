"""Values merged as Helm merges them (domain/doctor/values_merge.py): YAML loading with errors
naming file and line, maps merge, lists replace, null deletes, `--set` last, and the source of
each value."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tensorfusion.domain.doctor.set_values import SetError
from tensorfusion.domain.doctor.values_merge import (
    CHART_SOURCE,
    SET_SOURCE,
    ValuesError,
    key_path,
    load_values,
    merge_layers,
    merge_values,
    value_sources,
)

CHART: dict[str, Any] = {
    "controller": {
        "replicaCount": 1,
        "command": ["/manager", "-leader-elect"],
        "image": {"repository": "op", "tag": ""},
    },
    "greptime": {"host": "standalone", "password": "", "port": 4002},
    "list": [1, 2, 3],
}


# --- loading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_empty_map(text: str) -> None:
    assert load_values(text, "my-values.yaml") == {}


def test_loads_a_map_with_string_keys_and_dates_kept_as_text() -> None:
    text = "a:\n  b: [1, two]\n1: one\nday: 2024-01-31\nflag: true\n"
    assert load_values(text, "f.yaml") == {
        "a": {"b": [1, "two"]}, "1": "one", "day": "2024-01-31", "flag": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        (
            "controller:\n  replicaCount: 2\n command: []\n",
            "line 3, column 2",
            "expected <block end>",
        ),
        ("a: b: c\n", "line 1, column 5", "mapping values are not allowed here"),
        ("a: [1, 2\nb: 3\n", "line 2", "expected ',' or ']'"),
        ("a: 1\n---\nb: 2\n", "line 2", "expected a single document"),
        ("a: *missing\n", "line 1", "found undefined alias"),
        ("- 1\n- 2\n", "line 1", "must be a map of keys, not a list"),
        ("a: &x [1, *x]\n", "", "an alias refers to itself"),
        ("\n\njust text\n", "line 3", "must be a map of keys, not a string"),
    ],
)
def test_a_bad_file_names_the_file_the_line_and_the_problem(
    text: str, where: str, problem: str
) -> None:
    with pytest.raises(ValuesError) as caught:
        load_values(text, "my-values.yaml")
    message = str(caught.value)
    assert message.startswith(f"my-values.yaml: {where}")
    assert problem in message


# --- merging ---------------------------------------------------------------------------------


def test_maps_merge_recursively() -> None:
    merged = merge_values(CHART, {"controller": {"replicaCount": 2, "extra": {"x": 1}}})
    assert merged["controller"] == {
        "replicaCount": 2,
        "command": ["/manager", "-leader-elect"],
        "image": {"repository": "op", "tag": ""},
        "extra": {"x": 1},
    }
    assert merged["greptime"] == CHART["greptime"]


def test_lists_replace_never_merge() -> None:
    merged = merge_values(CHART, {"controller": {"command": ["/manager"]}, "list": [9]})
    assert merged["controller"]["command"] == ["/manager"]
    assert merged["list"] == [9]


def test_other_types_replace_either_way() -> None:
    merged = merge_values(CHART, {"greptime": "external", "list": {"a": 1}})
    assert merged["greptime"] == "external"
    assert merged["list"] == {"a": 1}


def test_an_explicit_null_deletes_the_key_at_any_depth() -> None:
    merged = merge_values(CHART, {"greptime": {"host": None}, "list": None, "new": {"x": None}})
    assert "host" not in merged["greptime"]
    assert "list" not in merged
    assert merged["new"] == {}


def test_merging_changes_neither_input() -> None:
    base, overlay = copy.deepcopy(CHART), {"controller": {"image": {"tag": "1.2.3"}}}
    merged = merge_values(base, overlay)
    merged["controller"]["command"].append("-x")
    merged["controller"]["image"]["tag"] = "changed"
    assert base == CHART
    assert overlay == {"controller": {"image": {"tag": "1.2.3"}}}


def test_layers_apply_files_in_order_then_set() -> None:
    merged = merge_layers(
        CHART,
        [("one.yaml", {"controller": {"replicaCount": 2}, "greptime": {"port": 5001}}),
         ("two.yaml", {"controller": {"replicaCount": 3}})],
        ["controller.replicaCount=4", "greptime.host=db.example"],
    )  # fmt: skip
    assert merged.values["controller"]["replicaCount"] == 4
    assert merged.values["greptime"] == {"host": "db.example", "password": "", "port": 5001}


def test_set_null_deletes_a_chart_value() -> None:
    merged = merge_layers(CHART, [], ["greptime.host=null"])
    assert "host" not in merged.values["greptime"]


def test_a_set_index_replaces_the_chart_list_as_helm_does() -> None:
    """`--set` writes into the user's values only: an index starts a new list there."""
    merged = merge_layers(CHART, [], ["controller.command[1]=-enable-alert"])
    assert merged.values["controller"]["command"] == [None, "-enable-alert"]


def test_a_set_index_edits_a_list_from_a_values_file() -> None:
    files = [("my.yaml", {"controller": {"command": ["/manager", "-a", "-b"]}})]
    merged = merge_layers(CHART, files, ["controller.command[1]=-leader-elect"])
    assert merged.values["controller"]["command"] == ["/manager", "-leader-elect", "-b"]


def test_a_null_in_an_earlier_file_then_a_map_brings_the_chart_keys_back_as_helm_does() -> None:
    files: list[tuple[str, dict[str, Any]]] = [
        ("one.yaml", {"greptime": None}),
        ("two.yaml", {"greptime": {"port": 1}}),
    ]
    merged = merge_layers(CHART, files, [])
    assert merged.values["greptime"] == {"host": "standalone", "password": "", "port": 1}


def test_a_bad_set_is_an_error_naming_the_expression() -> None:
    with pytest.raises(SetError, match=r'^--set "controller\.replicaCount": key'):
        merge_layers(CHART, [], ["controller.replicaCount"])


# --- sources ---------------------------------------------------------------------------------


def test_each_leaf_names_the_last_layer_that_set_it() -> None:
    merged = merge_layers(
        CHART,
        [("prod.yaml", {"controller": {"replicaCount": 2}, "greptime": {"password": "p"}}),
         ("my.yaml", {"controller": {"command": ["/manager"]}})],
        ["greptime.port=5001"],
    )  # fmt: skip
    sources = merged.sources
    assert sources["controller.replicaCount"] == "prod.yaml"
    assert sources["greptime.password"] == "prod.yaml"
    assert sources["controller.command"] == "my.yaml"
    assert sources["greptime.port"] == SET_SOURCE
    assert sources["greptime.host"] == CHART_SOURCE
    assert sources["controller.image.tag"] == CHART_SOURCE


def test_a_password_given_with_set_is_sourced_to_set_even_over_a_file() -> None:
    files = [("my.yaml", {"greptime": {"password": "in-file"}})]
    merged = merge_layers(CHART, files, ["greptime.password=secret"])
    assert merged.sources["greptime.password"] == SET_SOURCE


def test_a_null_hides_earlier_files_but_not_the_chart() -> None:
    files: list[tuple[str, dict[str, Any]]] = [
        ("one.yaml", {"greptime": {"password": "p", "port": 1}}),
        ("two.yaml", {"greptime": None}),
        ("three.yaml", {"greptime": {"port": 2}}),
    ]
    merged = merge_layers(CHART, files, [])
    assert merged.values["greptime"] == {"host": "standalone", "password": "", "port": 2}
    assert merged.sources["greptime.password"] == CHART_SOURCE
    assert merged.sources["greptime.port"] == "three.yaml"


def test_deleted_values_have_no_source_and_dotted_keys_are_escaped() -> None:
    values = {"nodeSelector": {"kubernetes.io/os": "linux"}, "empty": {}}
    layers: list[tuple[str, dict[str, Any]]] = [("chart", {"empty": {}}), ("f.yaml", values)]
    assert value_sources(values, layers) == {
        r"nodeSelector.kubernetes\.io/os": "f.yaml",
        "empty": "f.yaml",
    }
    assert key_path(["a.b", "c"]) == r"a\.b.c"
