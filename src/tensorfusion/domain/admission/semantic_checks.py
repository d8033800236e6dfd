"""Checks on the resolved resources (admission.md §4 step 13)."""

from __future__ import annotations

from tensorfusion.domain.admission.quota_single import SingleQuota, single_cap_problems
from tensorfusion.domain.allocation_request import ResourceAmount
from tensorfusion.domain.annotation_errors import Problem, invalid_value, problem
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.quantities import format_bytes, format_milli
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["semantic_problems"]


def semantic_problems(
    isolation: IsolationMode,
    *,
    requests: ResourceAmount,
    limits: ResourceAmount,
    count: int,
    quota: SingleQuota,
    keys: Keys,
) -> list[Problem]:
    """Resource presence (unless shared), request ≤ limit per unit, namespace single caps."""
    problems: list[Problem] = []
    if isolation is not IsolationMode.SHARED and not (
        requests.tflops_milli or requests.percent_milli or requests.vram_bytes
    ):
        problems.append(
            problem(
                f"no GPU resources requested: set {keys.tflops_request}, "
                f"{keys.compute_percent_request} or {keys.vram_request} "
                "(or the matching limit)",
                about="tflops-request",
            )
        )
    for request_key, limit_key, request, limit, text in (
        (
            keys.tflops_request,
            keys.tflops_limit,
            requests.tflops_milli,
            limits.tflops_milli,
            format_milli,
        ),
        (
            keys.compute_percent_request,
            keys.compute_percent_limit,
            requests.percent_milli,
            limits.percent_milli,
            format_milli,
        ),
        (keys.vram_request, keys.vram_limit, requests.vram_bytes, limits.vram_bytes, format_bytes),
    ):
        if limit and request > limit:
            problems.append(
                invalid_value(
                    request_key,
                    text(request),
                    f"must not exceed {limit_key} ({text(limit)})",
                )
            )
    problems.extend(single_cap_problems(quota, requests, limits, count, keys))
    return problems
