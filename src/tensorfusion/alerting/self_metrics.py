"""Prometheus series of the evaluator (alerting.md §9.2, metrics.md §10.4)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["EvaluatorMetrics"]


class EvaluatorMetrics:
    """Evaluations, durations, firing alerts, store and config state."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.evaluations = Counter(
            "tf_alert_evaluations",
            "Rule evaluations by rule and result (ok, query_error, template_error)",
            ["rule", "result"],
            registry=self.registry,
        )
        self.evaluation_errors = Counter(
            "tf_alert_evaluation_errors",
            "Evaluations that raised an unexpected exception (logged; the rule keeps running)",
            ["rule"],
            registry=self.registry,
        )
        self.state_save_errors = Counter(
            "tf_alert_state_save_errors",
            "Failed saves of the firing set (logged and retried)",
            registry=self.registry,
        )
        self.duration = Histogram(
            "tf_alert_evaluation_duration_seconds",
            "Wall time of one rule evaluation",
            ["rule"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.firing = Gauge(
            "tf_alert_firing", "Firing alerts by rule", ["rule"], registry=self.registry
        )
        self.store_up = Gauge(
            "tf_metrics_store_up",
            "Metrics store reachable (1) or not (0), for reads and writes",
            ["direction"],
            registry=self.registry,
        )
        self.config_valid = Gauge(
            "tf_dynamic_config_valid",
            "1 when the last config.yaml parsed, 0 when it was rejected (previous config kept)",
            registry=self.registry,
        )
        self.rules_invalid = Gauge(
            "tf_alert_rules_invalid", "Rules rejected by validation", registry=self.registry
        )
        self.rules_loaded = Gauge(
            "tf_alert_rules_loaded", "Valid rules being evaluated", registry=self.registry
        )
