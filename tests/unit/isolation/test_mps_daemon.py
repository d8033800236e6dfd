"""The daemon's vocabulary (domain/isolation/mps_daemon.py)."""

from __future__ import annotations

import pytest

from tensorfusion.domain.isolation.mps_daemon import (
    MpsCommandError,
    MpsState,
    MpsStatus,
    daemon_needed,
    mps_protocol,
    parse_server_list,
)
from tensorfusion.domain.vocabulary import IsolationMode, IsolationPolicy


@pytest.mark.parametrize(
    ("mode", "policy", "needed"),
    [
        (IsolationMode.SHARED, IsolationPolicy.STATIC, False),
        (IsolationMode.SOFT, IsolationPolicy.STATIC, True),
        (IsolationMode.HARD, IsolationPolicy.STATIC, True),
        (IsolationMode.PARTITIONED, IsolationPolicy.STATIC, False),
        (IsolationMode.SHARED, IsolationPolicy.DYNAMIC, True),
    ],
)
def test_daemon_needed(mode: IsolationMode, policy: IsolationPolicy, needed: bool) -> None:
    assert daemon_needed(mode, policy) is needed


@pytest.mark.parametrize(
    ("version", "protocol"),
    [("615.10", 3), ("620.1.2", 3), ("580.65.06", 2), ("", 2), ("garbage", 2)],
)
def test_mps_protocol_from_the_driver_version(version: str, protocol: int) -> None:
    assert mps_protocol(version) == protocol


def test_server_list() -> None:
    assert parse_server_list("") == ()
    assert parse_server_list("123\n 456 \n\n") == (123, 456)
    with pytest.raises(MpsCommandError, match="not a PID"):
        parse_server_list("Cannot find MPS control daemon process\n")


def test_status_json_bounds_the_message() -> None:
    body = MpsStatus(MpsState.FAILED, restarts=2, message="x" * 5000).to_json()
    assert body == {"state": "Failed", "restarts": 2, "protocol": 2, "message": "x" * 1024}
    assert not MpsStatus(MpsState.RESTARTING).serving
    assert MpsStatus(MpsState.RUNNING).serving
