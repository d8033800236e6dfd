"""`doctor`'s live.gpus on the nodes' MPS daemons: Failed or Restarting fail the check (the
node's new workers are refused), Starting is a warning, Off and Running say nothing."""

from __future__ import annotations

from typing import Any

from tensorfusion.doctor.live_checks import mps_findings


def _node(name: str, mps: dict[str, Any] | None) -> dict[str, Any]:
    status = {"hypervisorStatus": {"mps": mps}} if mps is not None else {}
    return {"metadata": {"name": name}, "status": status}


def test_the_daemons_states() -> None:
    nodes = [
        _node("a", {"state": "Failed", "message": "nvidia-cuda-mps-control not found"}),
        _node("b", {"state": "Restarting"}),
        _node("c", {"state": "Starting"}),
        _node("d", {"state": "Running"}),
        _node("e", {"state": "Off"}),
        _node("f", None),
    ]
    problems, others = mps_findings(nodes)
    assert problems == [
        "GPUNode a: MPS daemon Failed (nvidia-cuda-mps-control not found), its new workers are "
        "refused",
        "GPUNode b: MPS daemon Restarting, its new workers are refused",
    ]
    assert others == ["GPUNode c: MPS daemon Starting"]


def test_a_malformed_status_is_ignored() -> None:
    assert mps_findings([{"status": {"hypervisorStatus": {"mps": "garbage"}}}]) == ([], [])
