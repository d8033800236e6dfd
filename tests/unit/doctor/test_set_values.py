"""`--set` as Helm parses it (domain/doctor/set_values.py): paths, escapes, lists, typed values,
and errors that name the expression. The cases follow Helm's own `strvals` parser tests."""

from __future__ import annotations

from typing import Any

import pytest

from tensorfusion.domain.doctor.set_values import MAX_INDEX, SetError, apply_sets, parse_set


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a.b.c=v", {"a": {"b": {"c": "v"}}}),
        ("outer.inner1=x,outer.inner2=y", {"outer": {"inner1": "x", "inner2": "y"}}),
        (r"a\.b=v", {"a.b": "v"}),
        (r"nodeSelector.kubernetes\.io/os=linux", {"nodeSelector": {"kubernetes.io/os": "linux"}}),
        ("a=1,b=2", {"a": 1, "b": 2}),
        ("a=1,b=2,", {"a": 1, "b": 2}),
        (r"a=one\,two,b=three\=four", {"a": "one,two", "b": "three=four"}),
        ("a=one two", {"a": "one two"}),
        ("a=,b=x", {"a": "", "b": "x"}),
        ("a=", {"a": ""}),
        ("a={x,y}", {"a": ["x", "y"]}),
        ("a={1021,902},b={x}", {"a": [1021, 902], "b": ["x"]}),
        (r"a={x\,y,z}", {"a": ["x,y", "z"]}),
        ("a.b={x,y}", {"a": {"b": ["x", "y"]}}),
        ("list[0]=foo,list[1]=bar", {"list": ["foo", "bar"]}),
        ("list[0]=foo,list[3]=bar", {"list": ["foo", None, None, "bar"]}),
        ("a[1]=v", {"a": [None, "v"]}),
        ("list[0].foo=bar,list[0].hello=world", {"list": [{"foo": "bar", "hello": "world"}]}),
        ("a.b[1].foo=bar", {"a": {"b": [None, {"foo": "bar"}]}}),
        ("a.b[1].foo=bar,a.b[0].foo=baz", {"a": {"b": [{"foo": "baz"}, {"foo": "bar"}]}}),
        ("nested[0][0]=1", {"nested": [[1]]}),
        ("nested[1][1]=1", {"nested": [None, [None, 1]]}),
        ("list[0]=", {"list": [""]}),
    ],
)
def test_paths_lists_and_escapes(expression: str, expected: dict[str, Any]) -> None:
    assert parse_set(expression) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("False", False),
        ("null", None),
        ("NULL", None),
        ("0", 0),
        ("2", 2),
        ("-5", -5),
        ("+7", 7),
        ("1234567890", 1234567890),
        ("007", "007"),
        ("1.5", "1.5"),
        ("1e3", "1e3"),
        ("99999999999999999999", "99999999999999999999"),
        ("yes", "yes"),
        ("v1.2.3", "v1.2.3"),
        ("", ""),
    ],
)
def test_values_are_typed_like_helm(text: str, value: Any) -> None:
    assert parse_set(f"a={text}") == {"a": value}
    assert type(parse_set(f"a={text}")["a"]) is type(value)


def test_applies_into_existing_values_without_changing_them() -> None:
    values = {"outer": {"inner1": "old", "inner2": "kept"}, "list": ["a", "b", "c"]}
    applied = apply_sets(values, ["outer.inner1=new,outer.inner3=3", "list[1]=B"])
    assert applied == {"outer": {"inner1": "new", "inner2": "kept", "inner3": 3},
                       "list": ["a", "B", "c"]}  # fmt: skip
    assert values == {"outer": {"inner1": "old", "inner2": "kept"}, "list": ["a", "b", "c"]}


def test_expressions_apply_in_order_and_null_is_kept_for_the_merge() -> None:
    applied = apply_sets({}, ["a.b=1", "a.b=2", "c=null"])
    assert applied == {"a": {"b": 2}, "c": None}


def test_nested_list_items_merge_across_expressions() -> None:
    applied = apply_sets({}, ["listOuter[0][0].type=x", "listOuter[0][0].status=alive"])
    assert applied == {"listOuter": [[{"type": "x", "status": "alive"}]]}


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("a", 'key "a" has no value'),
        ("a,b=1", 'key "a" has no value (cannot end with ,)'),
        ("a=1,,b=2", 'key "" has no value (cannot end with ,)'),
        ("a.b", 'key "a.b" has no value'),
        ("a.", 'key "a." has no value'),
        ("a.=x", "empty key name"),
        ("=x", "empty key name"),
        ("a={x,y", "list must terminate with '}'"),
        ("a[x]=1", '"x" is not a whole number'),
        ("a[1=1", 'no closing "]"'),
        ("a[-1]=1", "negative -1 index not allowed"),
        (f"a[{MAX_INDEX + 1}]=1", "greater than maximum supported index"),
        ("a[0]", 'key "a[0]" has no value'),
        ("a[0]x=1", 'unexpected data at end of array index: "x"'),
        ("illegal[0]name.foo=bar", "unexpected data at end of array index"),
        ("a={x}y", 'key "y" has no value'),
        (".".join(["k"] * 32) + "=1", "maximum supported nested level of 30"),
    ],
)
def test_errors_name_the_expression_and_the_problem(expression: str, problem: str) -> None:
    with pytest.raises(SetError) as caught:
        parse_set(expression)
    assert str(caught.value).startswith(f'--set "{expression}": ')
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("values", "expression", "problem"),
    [
        ({"a": "text"}, "a.b=1", 'key "a" is a string, not a map'),
        ({"a": None}, "a.b=1", 'key "a" is a null, not a map'),
        ({"a": {"b": 1}}, "a[0]=1", 'key "a" is a map, not a list'),
        ({"a": ["x"]}, "a[0][0]=1", 'key "a[0]" is a string, not a list'),
    ],
)
def test_a_path_through_a_value_of_another_type_is_refused(
    values: dict[str, Any], expression: str, problem: str
) -> None:
    with pytest.raises(SetError, match=r"^--set") as caught:
        apply_sets(values, [expression])
    assert problem in str(caught.value)
