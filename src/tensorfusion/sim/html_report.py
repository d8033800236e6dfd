"""A self-contained HTML page of a simulation report with utilisation-over-time plots (SVG)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["render_html"]

_WIDTH, _HEIGHT, _PAD = 760, 220, 40
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _polyline(xs: Sequence[float], ys: Sequence[float], top: float, colour: str) -> str:
    if not xs:
        return ""
    span = (xs[-1] - xs[0]) or 1.0
    points = " ".join(
        f"{_PAD + (x - xs[0]) / span * (_WIDTH - 2 * _PAD):.1f},"
        f"{_HEIGHT - _PAD - (y / top if top else 0) * (_HEIGHT - 2 * _PAD):.1f}"
        for x, y in zip(xs, ys, strict=True)
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{points}"/>'


def _chart(title: str, timeline: list[dict[str, Any]], keys: Sequence[str], top: float) -> str:
    xs = [float(p["t"]) / 3600 for p in timeline]
    lines = [
        _polyline(xs, [float(p[k]) for p in timeline], top, _COLOURS[i % len(_COLOURS)])
        for i, k in enumerate(keys)
    ]
    legend = "".join(
        f'<text x="{_PAD + 170 * i}" y="14" fill="{_COLOURS[i % len(_COLOURS)]}">'
        f"{html.escape(k)}</text>"
        for i, k in enumerate(keys)
    )
    end = xs[-1] if xs else 0
    axes = (
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT - _PAD}" '
        f'stroke="#888"/><line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_HEIGHT - _PAD}" '
        f'stroke="#888"/><text x="{_PAD}" y="{_HEIGHT - 10}">0 h</text>'
        f'<text x="{_WIDTH - _PAD - 40}" y="{_HEIGHT - 10}">{end:.1f} h</text>'
        f'<text x="4" y="{_PAD + 4}">{top:g}</text>'
    )
    return (
        f"<h2>{html.escape(title)}</h2>"
        f'<svg width="{_WIDTH}" height="{_HEIGHT}" font-size="12" font-family="sans-serif">'
        f"{legend}{axes}{''.join(lines)}</svg>"
    )


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return f"<table>{body}</table>"


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
        ])
        for p in report["pools"]
    )  # fmt: skip
    alerts = "".join(
        f"<li>{html.escape(a.get('alertname', ''))} {html.escape(a.get('state', ''))} at "
        f"{html.escape(str(a.get('at', '')))}: {html.escape(a.get('summary', ''))}</li>"
        for a in report.get("alerts", [])
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>TensorFusion simulation</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
        "<h1>TensorFusion simulation report</h1>"
        f"<h2>Policy</h2><pre>{html.escape(json.dumps(report['policy'], indent=2))}</pre>"
        f"<h2>Summary</h2>{summary}<h2>Utilisation</h2>{utilisation}"
        + _chart("Allocated share of capacity (%)", timeline,
                 ("vramAllocatedPercent", "tflopsAllocatedPercent", "fragmentationPercent"), 100)
        + _chart("Pods", timeline, ("running", "waiting"), float(top_pods))
        + f"<h2>Pools</h2>{pools}<h2>Alerts</h2><ul>{alerts or '<li>none</li>'}</ul>"
        "</body></html>"
    )  # fmt: skip
