"""The alert evaluator component, config-dir hot reload, state store and event sink."""
