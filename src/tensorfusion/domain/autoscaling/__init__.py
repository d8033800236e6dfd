"""Workload right-sizing (`-enable-auto-scale`, docs/autoscaling.md): settings and the
recommendation math (pure)."""
