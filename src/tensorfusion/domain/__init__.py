"""Pure domain layer: no I/O."""
