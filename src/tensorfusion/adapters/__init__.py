"""Adapters: every module that performs I/O."""
