"""Alertmanager v2 client: one bounded outbox and sender per Alertmanager address."""
