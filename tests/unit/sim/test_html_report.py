"""The HTML report: one self-contained page with matplotlib charts inline as SVG."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from html.parser import HTMLParser
from typing import Any

import pytest

from tensorfusion.sim import report_charts
from tensorfusion.sim.html_report import render_html
from tensorfusion.sim.report_charts import Series

TIMELINE = [
    {"t": t, "running": r, "waiting": w, "vramAllocatedPercent": v,
     "tflopsAllocatedPercent": v / 2, "fragmentationPercent": f}
    for t, r, w, v, f in [(0, 0, 0, 0.0, 0.0), (1800, 3, 1, 60.0, 20.0), (7200, 1, 0, 25.0, 100.0)]
]  # fmt: skip

REPORT: dict[str, Any] = {
    "policy": {"placementMode": "CompactFirst"},
    "summary": {"placed": 3, "rejected": 0},
    "utilisation": {"vramAllocatedPercentMean": 28.3},
    "fragmentation": {"meanPercent": 40.0},
    "pools": [
        {"name": "pool-a", "placementMode": "CompactFirst", "nodes": 1, "gpus": 2,
         "physical": {"tflops": 100, "vram": "80Gi"}, "virtual": {"tflops": 100, "vram": "80Gi"},
         "peakAllocated": {"tflops": "25", "vram": "100Gi"},
         "oversubscription": {"tflopsOversellRatio": 1}},
    ],
    "alerts": [],
    "timeline": TIMELINE,
}  # fmt: skip

INFLATION = {
    "factor": 1.3,
    "seed": 42,
    "clusterGpus": 8,
    "points": [
        {"arrivedPercent": 0.0, "allocatedPercent": 0.0},
        {"arrivedPercent": 50.0, "allocatedPercent": 50.0},
        {"arrivedPercent": 100.0, "allocatedPercent": 90.0},
        {"arrivedPercent": 130.0, "allocatedPercent": 92.5},
    ],
}

INFLATION_TITLE = "Allocation ratio vs arrived workload"
TIMELINE_TEXTS = (
    "Allocated share of capacity (%)", "Pods", "simulated time (h)", "% of capacity",
    "vramAllocatedPercent", "tflopsAllocatedPercent", "fragmentationPercent", "running", "waiting",
)  # fmt: skip


class _Page(HTMLParser):
    """The page's tags, element ids and every src/href that a browser would resolve."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in {"src", "href", "xlink:href"}]
        self.ids += [v or "" for k, v in attrs if k == "id"]


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


def with_inflation() -> dict[str, Any]:
    report = copy.deepcopy(REPORT)
    report["inflation"] = copy.deepcopy(INFLATION)
    return report


Call = tuple[str, Sequence[float], Sequence[Series], dict[str, Any]]


@pytest.fixture
def chart_calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """The data handed to the chart renderer, chart by chart (the charts are still drawn)."""
    calls: list[Call] = []
    draw = report_charts.line_chart_svg

    def spy(salt: str, xs: Sequence[float], series: Sequence[Series], **kwargs: Any) -> str:
        calls.append((salt, xs, series, kwargs))
        return draw(salt, xs, series, **kwargs)

    monkeypatch.setattr("tensorfusion.sim.html_report.line_chart_svg", spy)
    return calls


def test_the_page_is_self_contained_with_the_two_timeline_charts() -> None:
    page = render_html(REPORT)
    resources = parse(page)
    assert resources.tags.count("svg") == 2
    assert "script" not in resources.tags
    assert not [tag for tag in resources.tags if tag in {"link", "img", "iframe", "object"}]
    assert [url for url in resources.urls if "://" in url or url.startswith("//")] == []
    assert all(url.startswith("#") for url in resources.urls)
    for text in TIMELINE_TEXTS:
        assert text in page, text
    assert INFLATION_TITLE not in page


def test_the_page_has_no_xml_prologue_date_or_metadata_and_renders_the_same_twice() -> None:
    page = render_html(REPORT)
    assert "<?xml" not in page
    assert "<!DOCTYPE svg" not in page
    assert "<metadata" not in page
    assert "dc:date" not in page
    assert render_html(REPORT) == page


def test_chart_ids_are_unique_on_the_page() -> None:
    page = render_html(with_inflation())
    ids = parse(page).ids
    assert ids
    assert len(ids) == len(set(ids))


def test_the_timeline_charts_plot_the_samples_against_hours(chart_calls: list[Call]) -> None:
    render_html(REPORT)
    (_, hours, shares, share_axes), (_, pod_hours, pods, pod_axes) = chart_calls
    assert list(hours) == list(pod_hours) == [0.0, 0.5, 2.0]
    assert [(s.label, list(s.ys)) for s in shares] == [
        ("vramAllocatedPercent", [0.0, 60.0, 25.0]),
        ("tflopsAllocatedPercent", [0.0, 30.0, 12.5]),
        ("fragmentationPercent", [0.0, 20.0, 100.0]),
    ]
    assert share_axes["ylim"] == (0, 100)
    assert [(s.label, list(s.ys)) for s in pods] == [
        ("running", [0.0, 3.0, 1.0]),
        ("waiting", [0.0, 1.0, 0.0]),
    ]
    assert pod_axes["ylim"] == (0, 3.0)


def test_the_inflation_curve_is_drawn_with_the_everything_allocated_line(
    chart_calls: list[Call],
) -> None:
    page = render_html(with_inflation())
    assert parse(page).tags.count("svg") == 3
    assert INFLATION_TITLE in page
    assert "everything allocated (y = x)" in page
    assert "arrived GPU request (% of cluster GPUs)" in page
    (_, arrived, (reference, allocated), axes) = chart_calls[-1]
    assert list(arrived) == [0.0, 50.0, 100.0, 130.0]
    assert allocated.xs is None
    assert list(allocated.ys) == [0.0, 50.0, 90.0, 92.5]
    assert (list(reference.xs or []), list(reference.ys)) == ([0, 130.0], [0, 130.0])
    assert axes["xlim"] == axes["ylim"] == (0, 130.0)


def test_an_inflation_curve_below_100_percent_still_shows_the_full_cluster(
    chart_calls: list[Call],
) -> None:
    report = with_inflation()
    report["inflation"]["points"] = report["inflation"]["points"][:2]
    render_html(report)
    (_, _, (reference, _), axes) = chart_calls[-1]
    assert list(reference.ys) == [0, 100.0]
    assert axes["ylim"] == (0, 100.0)


def test_an_empty_timeline_still_renders() -> None:
    report = copy.deepcopy(REPORT)
    report["timeline"] = []
    assert parse(render_html(report)).tags.count("svg") == 2


def test_the_charts_ignore_and_keep_the_global_matplotlib_settings() -> None:
    import matplotlib  # noqa: PLC0415 - the CLI imports matplotlib only to draw

    page = render_html(REPORT)
    with matplotlib.rc_context({"lines.linewidth": 7.0, "svg.hashsalt": None}):
        before = dict(matplotlib.rcParams)
        assert render_html(REPORT) == page
        assert dict(matplotlib.rcParams) == before


def test_pools_are_drawn_with_the_consoles_capacity_meters() -> None:
    page = render_html(copy.deepcopy(REPORT))
    assert ".meter .fill.over" in page  # the console's stylesheet, embedded
    assert '<div class="fill allocated" style="width:25.00%">' in page  # 25 of 100 TFLOPs
    # 100Gi peak over 80Gi physical: drawn as oversubscribed, the longest bar of its meter.
    assert '<div class="fill over" style="width:100.00%">' in page
    assert '<div class="fill physical" style="width:80.00%">' in page
