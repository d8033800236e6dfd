"""Hostile YAML and JSON documents are refused with the limit named, never a RecursionError."""

from __future__ import annotations

import pytest

from tensorfusion.domain.bounded_documents import (
    KUBERNETES_ANNOTATIONS_BYTES,
    DocumentError,
    DocumentLimitError,
    DocumentLimits,
    annotations_size_problem,
    load_json_document,
    load_yaml_document,
)


def test_deeply_nested_yaml_flow_is_refused_naming_the_depth() -> None:
    body = "a: " + "[" * 5000 + "]" * 5000
    with pytest.raises(DocumentLimitError, match="deeper than 100 levels"):
        load_yaml_document(body)


def test_deeply_nested_yaml_block_is_refused() -> None:
    body = "".join(f"{' ' * i}k:\n" for i in range(300)) + " " * 300 + "k: 1\n"
    with pytest.raises(DocumentLimitError, match="deeper than"):
        load_yaml_document(body)


def test_nesting_at_the_limit_loads() -> None:
    body = "[" * 100 + "]" * 100
    value = load_yaml_document(body)
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    assert depth == 100


def test_alias_expansion_counts_every_use() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    with pytest.raises(DocumentLimitError, match="expands to more than"):
        load_yaml_document("\n".join(lines))


def test_a_few_aliases_load() -> None:
    assert load_yaml_document("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}


def test_size_limit_is_named() -> None:
    with pytest.raises(DocumentLimitError, match="the limit is 10 bytes"):
        load_yaml_document("a: 12345678901", DocumentLimits(max_bytes=10))


def test_binary_input_is_a_document_error() -> None:
    with pytest.raises(DocumentError, match="not UTF-8"):
        load_yaml_document(b"\xff\xfe\x00binary")
    with pytest.raises(DocumentError, match="NUL"):
        load_yaml_document(b"a\x00b")


def test_invalid_yaml_names_the_line() -> None:
    with pytest.raises(DocumentError, match="line 2"):
        load_yaml_document("a: 1\n b: [\n")


def test_deep_json_is_refused() -> None:
    with pytest.raises(DocumentLimitError, match="deeper than"):
        load_json_document("[" * 500 + "]" * 500)
    # Past orjson's own 1,024 levels: the same message, naming our limit.
    with pytest.raises(DocumentLimitError, match="deeper than 100 levels"):
        load_json_document("[" * 5000 + "]" * 5000)


def test_annotations_over_256_kib_are_named() -> None:
    big = {"metadata": {"annotations": {"k": "v" * KUBERNETES_ANNOTATIONS_BYTES}}}
    problem = annotations_size_problem(big)
    assert problem is not None and "262144" in problem
    assert annotations_size_problem({"metadata": {"annotations": {"k": "v"}}}) is None
