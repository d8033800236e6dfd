"""Fixtures of the kubelet tests: a socket directory short enough for unix socket paths."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A fresh directory under /tmp: pytest's tmp_path can exceed the 107-byte socket limit."""
    path = Path(tempfile.mkdtemp(prefix="tfk-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
