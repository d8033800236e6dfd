"""Pure alerting logic: rule model, Go templates, conditions, labels and the alert state machine."""
