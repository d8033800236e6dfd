"""Metrics stores: embedded DuckDB, and GreptimeDB (HTTP line-protocol writes, MySQL reads)."""
