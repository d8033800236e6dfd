"""Terminal rendering of a simulation report with rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["print_report"]


def _kv_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(escape(key), "-" if value is None else escape(str(value)))
    return table


def print_report(report: dict[str, Any], console: Console) -> None:
    """Print outcomes, waits, utilisation, fragmentation, pools, rejections and alerts."""
    s = report["summary"]
    u = report["utilisation"]
    f = report["fragmentation"]
    policy = report["policy"]
    weights = policy["scoreWeights"]
    rows: list[tuple[str, Any]] = [
        ("isolation policy", policy["isolationPolicy"]),
        ("score weights", ", ".join(f"{k} {v}" for k, v in weights.items())),
    ]
    for name, pool in policy["pools"].items():
        rows.append((f"pool {name}", pool["placementMode"]))
        rows.append(("  oversubscription", pool["oversubscription"] or "off"))
    console.print(_kv_table("Policy", rows))
    console.print(
        _kv_table(
            "Outcome",
            [
                ("pods in trace", s["pods"]),
                ("placed", s["placed"]),
                ("  placed after waiting", s["placedAfterWaiting"]),
                ("pending at end", s["pending"]),
                ("rejected (invalid input)", s["rejected"]),
                (
                    "mean / p95 wait of placed pods",
                    f"{s['meanWaitSeconds']} s / {s['p95WaitSeconds']} s",
                ),
                ("longest wait of a pod still pending", f"{s['longestPendingWaitSeconds']} s"),
                ("simulated time", f"{s['simulatedSeconds'] / 3600:.2f} h"),
                ("scheduling decisions", s["decisions"]),
                ("decisions per second", s["decisionsPerSecond"]),
            ],
        )
    )
    console.print(
        _kv_table(
            "Utilisation (while pods ran or waited)",
            [
                (
                    "VRAM allocated, mean / peak",
                    f"{u['meanVramAllocatedPercent']} % / {u['peakVramAllocatedPercent']} %",
                ),
                ("TFLOPs allocated, mean", f"{u['meanTflopsAllocatedPercent']} %"),
                ("GPUs in use, mean", f"{u['meanGpusInUsePercent']} %"),
                ("nodes in use, mean", f"{u['meanNodesInUsePercent']} %"),
                ("fragmentation, mean / peak", f"{f['meanPercent']} % / {f['peakPercent']} %"),
            ],
        )
    )
    pools = Table(title="Pools: physical versus virtual capacity", title_justify="left")
    for column in ("pool", "mode", "nodes", "GPUs", "TFLOPs phys / virt", "VRAM phys / virt",
                   "peak allocated TFLOPs / VRAM"):  # fmt: skip
        pools.add_column(column)
    for p in report["pools"]:
        peak = p["peakAllocated"] or {}
        pools.add_row(
            escape(p["name"]),
            p["placementMode"],
            str(p["nodes"]),
            str(p["gpus"]),
            f"{p['physical']['tflops']} / {p['virtual']['tflops']}",
            f"{p['physical']['vram']} / {p['virtual']['vram']}",
            f"{peak.get('tflops', '-')} / {peak.get('vram', '-')}",
        )
    console.print(pools)
    if report["rejected"]:
        rejected = Table(title="Rejected pods", title_justify="left")
        rejected.add_column("pods")
        rejected.add_column("reason")
        for row in report["rejected"]:
            rejected.add_row(str(row["pods"]), escape(row["reason"]))
        console.print(rejected)
    if report["pending"]:
        pending = Table(title="Pending at end of trace", title_justify="left")
        pending.add_column("pod")
        pending.add_column("attempts")
        pending.add_column("last scheduling message")
        for row in report["pending"][:20]:
            pending.add_row(escape(row["pod"]), str(row["attempts"]), escape(row["message"] or ""))
        if len(report["pending"]) > 20:
            pending.add_row("...", "", f"{len(report['pending']) - 20} more")
        console.print(pending)
    alerts = report.get("alerts") or []
    if alerts:
        summary: dict[str, dict[str, Any]] = {}
        for a in alerts:
            row = summary.setdefault(
                str(a.get("alertname", "")),
                {"severity": a.get("severity", ""), "fired": 0, "first": None, "instances": set()},
            )
            if a.get("state") == "firing":
                row["fired"] += 1
                row["first"] = row["first"] or a.get("at")
                row["instances"].add(a.get("instance", ""))
        table = Table(title="Alerts the trace would have fired", title_justify="left")
        for column in ("alert", "severity", "times fired", "instances", "first fired"):
            table.add_column(column)
        for name, row in sorted(summary.items()):
            table.add_row(
                escape(name), escape(str(row["severity"])), str(row["fired"]),
                str(len(row["instances"])), str(row["first"] or "-"),
            )  # fmt: skip
        console.print(table)
        console.print("Every firing and resolution, with its text, is in the JSON report.")
