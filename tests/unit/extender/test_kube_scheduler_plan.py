"""Start-up checks of the child kube-scheduler: binary, configuration and version skew, each
one line naming what is wrong."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.extender.kube_scheduler import (
    SchedulerStartError,
    binary_version,
    check_versions,
    plan_kube_scheduler,
)


def executable(path: Path, text: str = "#!/bin/sh\necho 'Kubernetes v1.37.2'\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_plan_derives_the_configuration_with_our_extender(tmp_path: Path) -> None:
    binary = executable(tmp_path / "kube-scheduler")
    plan = plan_kube_scheduler(default_scheduler_config(), binary=str(binary),
                               extender_address="127.0.0.1:8082", kubeconfig="/k")  # fmt: skip
    [extender] = plan.config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8082/scheduler"
    assert plan.config["clientConnection"]["kubeconfig"] == "/k"
    assert plan.config["leaderElection"]["leaderElect"] is False


def test_a_missing_or_non_executable_binary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchedulerStartError, match="no such file"):
        plan_kube_scheduler(default_scheduler_config(), binary=str(tmp_path / "absent"),
                            extender_address="127.0.0.1:8082", kubeconfig=None)  # fmt: skip
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(SchedulerStartError, match="not executable"):
        plan_kube_scheduler(default_scheduler_config(), binary=str(plain),
                            extender_address="127.0.0.1:8082", kubeconfig=None)  # fmt: skip


def test_a_user_extender_list_is_refused(tmp_path: Path) -> None:
    config = {**default_scheduler_config(), "extenders": [{"urlPrefix": "http://x"}]}
    with pytest.raises(SchedulerStartError, match="extenders is not supported"):
        plan_kube_scheduler(config, binary=str(executable(tmp_path / "ks")),
                            extender_address="127.0.0.1:8082", kubeconfig=None)  # fmt: skip


def test_no_tensor_fusion_profile_is_refused(tmp_path: Path) -> None:
    config = {**default_scheduler_config(), "profiles": [{"schedulerName": "other"}]}
    with pytest.raises(SchedulerStartError, match="tensor-fusion-scheduler"):
        plan_kube_scheduler(config, binary=str(executable(tmp_path / "ks")),
                            extender_address="127.0.0.1:8082", kubeconfig=None)  # fmt: skip


def test_version_skew() -> None:
    assert check_versions("Kubernetes v1.37.2", "v1.37.0") is None
    assert check_versions("Kubernetes v1.36.9", "v1.37.2") is None
    older = check_versions("Kubernetes v1.34.0", "v1.37.2")
    assert older is not None and "supported: 1.36 to 1.37" in older
    with pytest.raises(SchedulerStartError) as raised:
        check_versions("Kubernetes v1.38.0", "v1.37.2")
    message = str(raised.value)
    assert "v1.38.0" in message and "v1.37.2" in message and "1.36 to 1.37" in message


async def test_the_binary_reports_its_version(tmp_path: Path) -> None:
    assert await binary_version(str(executable(tmp_path / "ks"))) == "Kubernetes v1.37.2"
    failing = executable(tmp_path / "bad", "#!/bin/sh\necho boom; exit 2\n")
    with pytest.raises(SchedulerStartError, match="boom"):
        await binary_version(str(failing))
