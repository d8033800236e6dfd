"""Classification (admission.md §3); the auto-migration scope (§10) has its own file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tensorfusion.domain.admission import AdmissionDecision, AdmissionOutcome, read_auto_migration
from tensorfusion.domain.admission.classification import Route, classify
from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.native_resources import (
    DEFAULT_NATIVE_RESOURCES,
    has_native_gpus,
)

from .admission_builders import P, make_pod, native_container, resources_ok

Run = Callable[..., AdmissionDecision]
NATIVE = [native_container("a", 1)]


def route(pod: dict[str, Any], **kwargs: Any) -> Route:
    options: dict[str, Any] = {
        "namespace": "default",
        "native_resources": DEFAULT_NATIVE_RESOURCES,
        "auto_migration": None,
        "namespace_labels": None,
        "progressive_migration": False,
        "keys": KEYS,
    }
    options.update(kwargs)
    options["auto_migration"] = read_auto_migration(options["auto_migration"])
    return classify(pod, **options).route


def test_enabled_label_goes_to_the_tf_pipeline() -> None:
    assert route(make_pod(resources_ok())) is Route.TF


@pytest.mark.parametrize("label", [None, "false", "yes"])
def test_pod_without_native_gpus_is_untouched(run: Run, label: str | None) -> None:
    pod = make_pod(enabled=None, labels={P + "enabled": label} if label else None)
    assert route(pod, progressive_migration=True) is Route.UNTOUCHED
    decision = run(pod, progressive_migration=True, auto_migration={"enable": True})
    assert decision.outcome is AdmissionOutcome.UNTOUCHED and decision.patch == ()


def test_native_pod_without_migration_is_untouched() -> None:
    assert route(make_pod(enabled=None, containers=NATIVE)) is Route.UNTOUCHED


def test_auto_migration_selects_unlabelled_native_pod() -> None:
    pod = make_pod(enabled=None, containers=NATIVE)
    assert route(pod, auto_migration={"enable": True}) is Route.MIGRATE


def test_auto_migration_skips_opted_out_pod() -> None:
    pod = make_pod(enabled=False, containers=NATIVE)
    assert route(pod, auto_migration={"enable": True}) is Route.UNTOUCHED
    assert route(pod, auto_migration={"enable": True}, progressive_migration=True) is (
        Route.PROGRESSIVE
    )


def test_progressive_without_scheduler_name_adds_it(run: Run) -> None:
    pod = make_pod(enabled=None, containers=NATIVE)
    del pod["spec"]["schedulerName"]
    decision = run(pod, progressive_migration=True)
    assert list(decision.patch) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "tensor-fusion-scheduler"}
    ]


def test_progressive_pod_already_on_our_scheduler_is_untouched(run: Run) -> None:
    pod = make_pod(
        enabled=None, containers=NATIVE, spec={"schedulerName": "tensor-fusion-scheduler"}
    )
    decision = run(pod, progressive_migration=True)
    assert decision.outcome is AdmissionOutcome.UNTOUCHED and not decision.warnings


def test_native_gpus_in_requests_or_init_containers_count() -> None:
    in_requests = {"name": "a", "resources": {"requests": {"amd.com/gpu": "1"}}}
    assert has_native_gpus(make_pod(containers=[in_requests]), DEFAULT_NATIVE_RESOURCES)
    init = make_pod(spec={"initContainers": NATIVE})
    assert has_native_gpus(init, DEFAULT_NATIVE_RESOURCES)
    zero = make_pod(containers=[native_container("a", "0")])
    assert not has_native_gpus(zero, DEFAULT_NATIVE_RESOURCES)
