"""Process logging: the HTTP clients' per-request INFO lines are dropped unless debugging."""

from __future__ import annotations

import logging

from tensorfusion.app.logging_setup import configure_logging


def test_request_loggers_only_warn_unless_debugging() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("text", "info")
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
        assert logging.getLogger("tensorfusion.controller").isEnabledFor(logging.INFO)
        configure_logging("json", "debug")
        assert logging.getLogger("httpx").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.NOTSET)
