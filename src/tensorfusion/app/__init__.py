"""Process wiring: each command's settings, clients, caches and feature tasks put together."""
