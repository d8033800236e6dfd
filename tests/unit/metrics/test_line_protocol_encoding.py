"""Line-protocol encoding checked with a real parser (line-protocol-parser), and our parser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from line_protocol_parser import parse_line  # type: ignore[import-untyped]

from tensorfusion.domain.metrics.line_protocol import (
    UnencodableError,
    encode_row,
    encode_rows,
    parse_lines,
)
from tensorfusion.domain.metrics.rows import MetricRow
from tests.hypothesis_budget import examples

# Characters with a meaning in line protocol, drawn often; any other character too.
_SPECIAL = "\\\t\r\n,= "
_tag_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(_SPECIAL),
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    ),
    min_size=1,
    max_size=12,
)
# A key may begin with a tab: it cannot be written there (parsers take it as whitespace).
# Keys that differ only in CR, LF or space are drawn often: they would be written alike.
_key = st.one_of(
    st.from_regex(r"[a-z_\t][a-z0-9_ ,=\\\t\r\n]{0,10}", fullmatch=True),
    st.sampled_from(["a b", "a\nb", "a\rb"]),
)
_field_value = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=20,
    ),
)


def _as_written(text: str) -> str:
    """CR and LF cannot be carried in keys and tag values: they arrive as spaces."""
    return text.replace("\r", " ").replace("\n", " ")


def _writable(text: str) -> bool:
    """No backslash at the end or before a backslash, ',', '=', space, CR or LF."""
    return all(
        text[index + 1 : index + 2] not in ("", *"\\,= \r\n")
        for index, char in enumerate(text)
        if char == "\\"
    )


@settings(max_examples=examples(500), deadline=None)
@given(
    tags=st.dictionaries(_key, _tag_text, max_size=4),
    fields=st.dictionaries(_key, _field_value, min_size=1, max_size=5),
    ts=st.integers(min_value=0, max_value=2**50),
)
def test_the_real_parser_reads_back_what_we_write(
    tags: dict[str, str], fields: dict[str, object], ts: int
) -> None:
    row = MetricRow("tf_gpu_usage", ts, tags, fields)  # type: ignore[arg-type]
    texts = [*tags, *tags.values(), *fields]
    want_tags = {_as_written(key): _as_written(value) for key, value in tags.items()}
    want_fields = {_as_written(key): value for key, value in fields.items()}
    if (
        not all(map(_writable, texts))
        or any(key.startswith("\t") for key in [*tags, *fields])
        or len(want_tags) < len(tags)  # two keys that read back as one
        or len(want_fields) < len(fields)
    ):
        with pytest.raises(
            UnencodableError, match=r"table tf_gpu_usage(, (tag|field)|: (tag|field) keys)"
        ):
            encode_row(row)
        return
    line = encode_row(row)
    assert line is not None
    parsed = parse_line(line)
    assert parsed["measurement"] == "tf_gpu_usage"
    assert parsed["tags"] == want_tags
    assert parsed["time"] == ts
    assert set(parsed["fields"]) == set(want_fields)
    for key, value in want_fields.items():
        got = parsed["fields"][key]
        assert type(got) is type(value), (key, value, got)
        assert got == value
    ours = parse_lines(line)[0]
    assert (dict(ours.tags), dict(ours.fields), ours.ts_ms) == (want_tags, want_fields, ts)


def test_tabs_backslashes_and_newlines_in_tags() -> None:
    row = MetricRow("m", 1, {"k\tk": "a\tb\\c", "n": "x\r\ny"}, {"f": 1})
    line = encode_row(row)
    assert line == "m,k\tk=a\tb\\c,n=x\\ \\ y f=1i 1"
    assert parse_line(line)["tags"] == {"k\tk": "a\tb\\c", "n": "x  y"}
    for bad in ("end\\", "two\\\\", "a\\,b", "a\\ b", "a\\=b", "a\\\nb"):
        with pytest.raises(UnencodableError, match=r"table m, tag 'n': .* cannot be written"):
            encode_row(MetricRow("m", 1, {"n": bad}, {"f": 1}))
    with pytest.raises(UnencodableError, match="table m, field key"):
        encode_row(MetricRow("m", 1, {}, {"f\\": 1}))


def test_types_escaping_and_skips() -> None:
    skipped: set[tuple[str, str]] = set()
    row = MetricRow(
        "tf_worker_usage",
        1_700_000_000_123,
        {"worker": "w 1,a=b", "node": "", "pool": "p"},
        {
            "memory_bytes": 85899345920,
            "ready": True,
            "x": 0.1 + 0.2,
            "bad": math.nan,
            "inf": math.inf,
            "msg": 'say "hi"\\',
        },
    )
    line = encode_row(row, skipped)
    assert line == (
        "tf_worker_usage,worker=w\\ 1\\,a\\=b,pool=p memory_bytes=85899345920i,ready=true,"
        'x=0.30000000000000004,msg="say \\"hi\\"\\\\" 1700000000123'
    )
    assert skipped == {("tf_worker_usage", "bad"), ("tf_worker_usage", "inf")}
    assert "node=" not in line


def test_fast_path_matches_the_general_path() -> None:
    row = MetricRow(
        "tf_gpu_usage",
        5,
        {"node": "n", "pool": "p", "uuid": "u"},
        {"a": 1e-05, "b": 1e16, "c": 3, "d": False, "e": 123456.7},
    )
    parsed = parse_line(encode_row(row) or "")
    assert parsed["fields"] == {"a": 1e-05, "b": 1e16, "c": 3, "d": False, "e": 123456.7}


def test_a_row_without_fields_is_not_sent() -> None:
    assert encode_row(MetricRow("t", 1, {}, {"x": math.nan})) is None
    assert encode_rows([MetricRow("t", 1, {}, {}), MetricRow("t", 2, {}, {"y": 1})]) == "t y=1i 2"


def test_parse_precision_and_multiline_strings() -> None:
    rows = parse_lines('m,t=a f="one\ntwo",g=1u 5\n\n# comment\nm g=2i 6', precision="s")
    assert [(dict(r.fields), r.ts_ms) for r in rows] == [
        ({"f": "one\ntwo", "g": 1}, 5000),
        ({"g": 2}, 6000),
    ]


def test_a_key_beginning_with_a_tab_is_refused() -> None:
    # Written raw, `m,k=v \tf=1i 1` reads back as field `f` in both parsers.
    with pytest.raises(UnencodableError, match=r"table m, field key: '\\tf' cannot be written"):
        encode_row(MetricRow("m", 1, {"k": "v"}, {"\tf": 1}))
    with pytest.raises(UnencodableError, match=r"table m, tag key: '\\tk' cannot be written"):
        encode_row(MetricRow("m", 1, {"\tk": "v"}, {"f": 1}))
    assert encode_row(MetricRow("m", 1, {"k\tk": "v"}, {"f\tf": 1})) == "m,k\tk=v f\tf=1i 1"


def test_keys_that_would_read_back_as_one_are_refused() -> None:
    # "a\nb" is written as "a\\ b", exactly like "a b": the real parser rejects the duplicate
    # tag key and GreptimeDB would fail the whole batch.
    message = r"table m: tag keys 'a\\nb' and 'a b' cannot both be written"
    with pytest.raises(UnencodableError, match=message):
        encode_row(MetricRow("m", 1, {"a\nb": "1", "a b": "2"}, {"f": 1}))
    message = r"table m: field keys 'a\\rb' and 'a b' cannot both be written"
    with pytest.raises(UnencodableError, match=message):
        encode_row(MetricRow("m", 1, {}, {"a\rb": 1, "a b": 2.5}))
    # An empty tag is left out, so it collides with nothing.
    assert encode_row(MetricRow("m", 1, {"a\nb": "", "a b": "2"}, {"f": 1})) == "m,a\\ b=2 f=1i 1"


@pytest.mark.parametrize(
    ("row", "where"),
    [
        (MetricRow("m", 1, {"node": "a\udc80"}, {"f": 1.0}), "tag 'node'"),
        (MetricRow("m", 1, {"n\ud800": "a"}, {"f": 1.0}), "tag key"),
        (MetricRow("m", 1, {}, {"f\ud800": 1.0}), "field key"),
        (MetricRow("m", 1, {}, {"msg": "x\ud800"}), "field 'msg'"),
    ],
)
def test_text_utf8_cannot_encode_is_refused(row: MetricRow, where: str) -> None:
    with pytest.raises(UnencodableError, match=f"table m, {where}: .* is a lone surrogate"):
        encode_row(row)
