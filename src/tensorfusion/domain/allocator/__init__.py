"""The GPU store, filter chain, placement, quotas and oversubscription (scheduling.md §3-§9)."""
