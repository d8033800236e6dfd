"""Fixtures of the admission tests (builders live in admission_builders.py)."""

from .admission_builders import run

__all__ = ["run"]
