"""Workloads and workers: usage against request and limit, and throttling."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import (
    PanelIds,
    filter_variable,
    new_dashboard,
    row,
    table_panel,
    timeseries_panel,
)

__all__ = ["UID", "build"]

UID = "tf-workloads"


def build() -> Dashboard:
    """The workloads dashboard."""
    ids = PanelIds()
    filters = [
        filter_variable("pool", "Pool"),
        filter_variable("namespace", "Namespace"),
        filter_variable("workload", "Workload"),
    ]
    return (
        new_dashboard(
            UID, "Workloads", "Workers' usage against their requests and limits.", filters
        )
        .with_row(row(ids, "Workers"))
        .with_panel(
            table_panel(
                ids,
                "Workers now",
                "workloads.workers",
                description="Requests and limits are per GPU.",
            )
        )
        .with_panel(
            table_panel(
                ids,
                "Usage against request and limit over the range",
                "workloads.usage_against_request",
                description="Per worker and GPU: average and peak TFLOPS, peak VRAM, "
                "against the worker's per-GPU request and limit.",
            )
        )
        .with_row(row(ids, "Over time"))
        .with_panel(
            timeseries_panel(
                ids,
                "TFLOPS per GPU: used, requested, limit",
                ["workloads.tflops_used", "workloads.tflops_requested"],
                unit="none",
            )
        )
        .with_panel(
            timeseries_panel(
                ids,
                "VRAM per GPU: used, requested, limit",
                ["workloads.vram_used", "workloads.vram_requested"],
                unit="bytes",
            )
        )
        .with_row(row(ids, "Throttling"))
        .with_panel(
            table_panel(
                ids,
                "Throttling in the range",
                "workloads.throttling_increase",
                description="Increase of the agents' counters over the range: compute "
                "held back by the limit, VRAM frozen and resumed.",
            )
        )
        .with_panel(
            timeseries_panel(
                ids,
                "Throttling counters (cumulative)",
                ["workloads.throttling"],
                unit="none",
                span=24,
            )
        )
    )
