"""A self-contained HTML page of a simulation report, with matplotlib charts inline as SVG."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from tensorfusion.adapters.package_data import console_asset
from tensorfusion.domain.annotation_values import parse_tflops_milli, parse_vram_bytes
from tensorfusion.sim.report_charts import Series, line_chart_svg
from tensorfusion.sim.right_sizing_view import (
    OUTCOME_ROWS,
    freed_rows,
    plan_name,
    plan_notes,
    sized_text,
)

__all__ = ["render_html"]

_PERCENT_KEYS = ("vramAllocatedPercent", "tflopsAllocatedPercent", "fragmentationPercent")
_POD_KEYS = ("running", "waiting")


def _figure(title: str, svg: str) -> str:
    return f'<h2>{html.escape(title)}</h2><figure class="chart">{svg}</figure>'


def _timeline_chart(
    salt: str,
    title: str,
    timeline: list[dict[str, Any]],
    keys: Sequence[str],
    ylabel: str,
    top: float,
) -> str:
    """`keys` of the timeline samples against simulated time in hours, from 0 to `top`."""
    xs = [float(p["t"]) / 3600 for p in timeline]
    series = [Series(k, [float(p[k]) for p in timeline]) for k in keys]
    svg = line_chart_svg(
        salt, xs, series, xlabel="simulated time (h)", ylabel=ylabel, ylim=(0, top)
    )
    return _figure(title, svg)


def _inflation_chart(inflation: dict[str, Any]) -> str:
    """Allocated against arrived GPU request (% of the cluster's GPUs), beside y = x."""
    points = inflation["points"]
    arrived = [float(p["arrivedPercent"]) for p in points]
    allocated = [float(p["allocatedPercent"]) for p in points]
    end = max([100.0, *arrived])
    series = [
        Series("everything allocated (y = x)", [0, end], xs=[0, end], linestyle="--",
               color="#888888"),
        Series("allocated", allocated, color="#1f77b4"),
    ]  # fmt: skip
    svg = line_chart_svg(
        "inflation", arrived, series,
        xlabel="arrived GPU request (% of cluster GPUs)",
        ylabel="allocated (% of cluster GPUs)",
        xlim=(0, end), ylim=(0, end), height=4.0,
    )  # fmt: skip
    caption = (
        f"<p>Inflation factor {html.escape(str(inflation.get('factor', '')))}, seed "
        f"{html.escape(str(inflation.get('seed', '')))}, "
        f"{html.escape(str(inflation.get('clusterGpus', '')))} GPUs in the cluster.</p>"
    )
    return _figure("Allocation ratio vs arrived workload", svg) + caption


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return f"<table>{body}</table>"


def _grid(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _right_sizing(section: dict[str, Any]) -> str:
    """The what-if of `--auto-scale`: requests before and after, outcomes, capacity given back."""
    before, after = section["baseline"], section["rightSized"]
    workloads = [
        (plan_name(p), p["pods"], p["settings"], sized_text(p, "tflops"),
         sized_text(p, "vram"), plan_notes(p))
        for p in section["workloads"]
    ]  # fmt: skip
    outcome = [
        (label, f"{before[k]}{unit}", f"{after[k]}{unit}") for label, k, unit in OUTCOME_ROWS
    ]
    return (
        "<h2>Right-sizing what-if</h2>"
        f"<p>{html.escape(section['model'])}</p><h3>Per-GPU request (limit)</h3>"
        + _grid(("workload", "pods", "settings", "TFLOPs", "VRAM", "note"), workloads)
        + "<h3>The trace as given and right-sized</h3>"
        + _grid(("", "as given", "right-sized"), outcome)
        + "<h3>Capacity given back by the pods the trace placed</h3>"
        + _grid(("", "TFLOPs", "VRAM"), freed_rows(section))
    )


def _meter(rows: Sequence[tuple[str, float, str, str]]) -> str:
    """Capacity bars (label, value, shown text, kind) on one scale, with the markup and the
    `.meter` classes of the web console's stylesheet (console.css, `meter()` in console.js)."""
    top = max([value for _, value, _, _ in rows] + [1e-12])
    cells = "".join(
        f'<span class="label">{html.escape(label)}</span><div class="track">'
        f'<div class="fill {kind}" style="width:{min(100.0, 100 * value / top):.2f}%"></div>'
        f'</div><span class="value">{html.escape(shown)}</span>'
        for label, value, shown, kind in rows
    )
    return f'<div class="meter">{cells}</div>'


def _pool_meters(pool: dict[str, Any]) -> str:
    """Physical and virtual capacity against the peak allocated, for TFLOPs and VRAM."""
    out = []
    for key, unit, parse in (("tflops", "TFLOPs", parse_tflops_milli),
                             ("vram", "VRAM", parse_vram_bytes)):  # fmt: skip
        peak_text = (pool.get("peakAllocated") or {}).get(key, "0")
        texts = (str(pool["physical"][key]), str(pool["virtual"][key]), str(peak_text))
        physical, virtual, peak = (float(parse(t)) for t in texts)
        out.append(f"<p>{unit}</p>" + _meter([
            ("physical", physical, texts[0], "physical"),
            ("virtual", virtual, texts[1], "virtual"),
            ("peak allocated", peak, texts[2], "over" if peak > physical else "allocated"),
        ]))  # fmt: skip
    return "".join(out)


def render_html(report: dict[str, Any]) -> str:
    """The report as one HTML page: summary tables and utilisation plots."""
    timeline = report["timeline"]
    top_pods = max((max(p["running"], p["waiting"]) for p in timeline), default=1) or 1
    summary = _table(list(report["summary"].items()))
    utilisation = _table(
        list(report["utilisation"].items())
        + [(f"fragmentation {key}", value) for key, value in report["fragmentation"].items()]
    )
    pools = "".join(
        f"<h3>Pool {html.escape(p['name'])}</h3>" + _table([
            ("placement mode", p["placementMode"]),
            ("nodes / GPUs", f"{p['nodes']} / {p['gpus']}"),
            ("physical TFLOPs / VRAM", f"{p['physical']['tflops']} / {p['physical']['vram']}"),
            ("virtual TFLOPs / VRAM", f"{p['virtual']['tflops']} / {p['virtual']['vram']}"),
            ("oversubscription", json.dumps(p["oversubscription"])),
        ]) + _pool_meters(p)
        for p in report["pools"]
    )  # fmt: skip
    alerts = "".join(
        f"<li>{html.escape(a.get('alertname', ''))} {html.escape(a.get('state', ''))} at "
        f"{html.escape(str(a.get('at', '')))}: {html.escape(a.get('summary', ''))}</li>"
        for a in report.get("alerts", [])
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>TensorFusion simulation</title>"
        f"<style>{(console_asset('console.css') or b'').decode()}</style>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:auto}"
        "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}"
        "figure.chart{margin:0}figure.chart svg{max-width:100%;height:auto}</style></head><body>"
        "<h1>TensorFusion simulation report</h1>"
        f"<h2>Policy</h2><pre>{html.escape(json.dumps(report['policy'], indent=2))}</pre>"
        f"<h2>Summary</h2>{summary}<h2>Utilisation</h2>{utilisation}"
        + _timeline_chart("allocation", "Allocated share of capacity (%)", timeline,
                          _PERCENT_KEYS, "% of capacity", 100)
        + _timeline_chart("pods", "Pods", timeline, _POD_KEYS, "pods", float(top_pods))
        + (_inflation_chart(report["inflation"]) if "inflation" in report else "")
        + (_right_sizing(report["rightSizing"]) if "rightSizing" in report else "")
        + f"<h2>Pools</h2>{pools}<h2>Alerts</h2><ul>{alerts or '<li>none</li>'}</ul>"
        "</body></html>"
    )  # fmt: skip
