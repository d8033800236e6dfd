"""Line-protocol encoding checked with a real parser (line-protocol-parser), and our parser."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from line_protocol_parser import parse_line  # type: ignore[import-untyped]

from tensorfusion.domain.metrics.line_protocol import encode_row, encode_rows, parse_lines
from tensorfusion.domain.metrics.rows import MetricRow

_tag_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\\"),
    min_size=1,
    max_size=12,
).filter(lambda text: text.strip() == text and not text.startswith("#"))
_key = st.from_regex(r"[a-z_][a-z0-9_ ,=]{0,10}", fullmatch=True).filter(
    lambda text: not text.endswith(" ")
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


@settings(max_examples=300, deadline=None)
@given(
    tags=st.dictionaries(_key, _tag_text, max_size=4),
    fields=st.dictionaries(_key, _field_value, min_size=1, max_size=5),
    ts=st.integers(min_value=0, max_value=2**50),
)
def test_the_real_parser_reads_back_what_we_write(
    tags: dict[str, str], fields: dict[str, object], ts: int
) -> None:
    row = MetricRow("tf_gpu_usage", ts, tags, fields)  # type: ignore[arg-type]
    line = encode_row(row)
    assert line is not None
    parsed = parse_line(line)
    assert parsed["measurement"] == "tf_gpu_usage"
    assert parsed["tags"] == tags
    assert parsed["time"] == ts
    assert set(parsed["fields"]) == set(fields)
    for key, value in fields.items():
        got = parsed["fields"][key]
        assert type(got) is type(value), (key, value, got)
        assert got == value
    ours = parse_lines(line)[0]
    assert (dict(ours.tags), dict(ours.fields), ours.ts_ms) == (tags, fields, ts)


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
