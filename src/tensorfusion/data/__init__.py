"""Package data: the shipped default alert rules and scheduler configuration (YAML)."""
