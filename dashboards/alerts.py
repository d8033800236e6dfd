"""Alerts: what each default rule's query returns over the range, and the history of the
conditions the rules watch.

The evaluator keeps its firing set in a ConfigMap and delivers to Alertmanager; the metrics
store holds no alert state, so these panels run the rules' own SQL on the store's rows.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import PanelIds, new_dashboard, row, table_panel, timeseries_panel
from dashboards.queries import ALERT_RULES, alert_rule_key

__all__ = ["UID", "build"]

UID = "tf-alerts"


def build() -> Dashboard:
    """The alerts dashboard."""
    ids = PanelIds()
    board = (
        new_dashboard(UID, "Alerts", "The default alert rules' conditions over the range.", [])
        .with_row(row(ids, "Condition history"))
        .with_panel(
            timeseries_panel(
                ids, "GPUs over the default thresholds", ["alerts.gpu_conditions"], unit="none"
            )
        )
        .with_panel(
            timeseries_panel(
                ids, "Nodes short of TFLOPS or VRAM", ["alerts.node_conditions"], unit="none"
            )
        )
        .with_panel(
            timeseries_panel(
                ids,
                "Allocation failures (cumulative)",
                ["alerts.allocation_failures"],
                unit="none",
                span=24,
            )
        )
        .with_row(row(ids, "Firing over the range (default rules' queries)"))
    )
    for name, rule in ALERT_RULES.items():
        description = (
            f"{rule['severity']}: the rows rule {name} returns with the dashboard's range as its "
            f"window (the evaluator uses the last {rule['evaluationInterval']} and needs "
            f"{rule['consecutiveCount']} evaluations in a row). {rule['summary']}"
        )
        board = board.with_panel(
            table_panel(ids, name, alert_rule_key(name), description=description, height=5)
        )
    return board
