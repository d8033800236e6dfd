"""Scheduling: native kube-scheduler subset, scheduler configuration, GPU plugins."""
