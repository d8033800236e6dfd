"""The admission pipeline (admission.md §3-§12) as pure functions: `admit(pod, facts)`.

Gather, then decide: the webhook shell fetches what `facts_needed` lists, calls `decide`; a
`PendingMutation` (every check passed) becomes the decision once the shell took the pod's index
(§4 step 15: so a denied or untouched pod never spends one); then it performs the decision's
writes (skipped on a dry run) and answers with its patch. `admit` does both with the index the
facts carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfusion.domain.admission.allocation_claims import allocation_claims
from tensorfusion.domain.admission.classification import Route, classify, with_progressive_scheduler
from tensorfusion.domain.admission.containers import container_names, resolve_injected_containers
from tensorfusion.domain.admission.decision import AdmissionDecision, AdmissionOutcome
from tensorfusion.domain.admission.declared_features import autoscaling_config, gang_scheduling
from tensorfusion.domain.admission.execution_mode import resolve_execution_mode
from tensorfusion.domain.admission.facts import AdmissionFacts
from tensorfusion.domain.admission.hardware import (
    dedicated_gpu_capacity,
    skipped_gpu_warnings,
    soft_isolation_problem,
)
from tensorfusion.domain.admission.hashing import client_config_hash
from tensorfusion.domain.admission.mps_variables import mps_user_warnings, mps_variable_problems
from tensorfusion.domain.admission.mutation import build_worker_pod
from tensorfusion.domain.admission.pool_resolution import resolve_pool
from tensorfusion.domain.admission.profile import ProfileSpec, read_profile
from tensorfusion.domain.admission.qos import derive_qos
from tensorfusion.domain.admission.quota_single import read_single_quota
from tensorfusion.domain.admission.replica_gate import CounterIncrement, evaluate_gate
from tensorfusion.domain.admission.resolved import ResolvedWorkload
from tensorfusion.domain.admission.resources import fill_defaults, resolve_count, resolve_resources
from tensorfusion.domain.admission.semantic_checks import semantic_problems
from tensorfusion.domain.admission.validation import validate_annotations
from tensorfusion.domain.admission.workload import WorkloadWrite, build_workload
from tensorfusion.domain.admission.workload_identity import resolve_workload_identity
from tensorfusion.domain.annotation_errors import AnnotationError, Problem, problem
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.json_patch import json_copy, json_patch_diff
from tensorfusion.domain.native_resources import (
    inspect_native_gpus,
    native_injection_problems,
)
from tensorfusion.domain.object_views import annotations_of, labels_of, namespace_of
from tensorfusion.domain.vocabulary import IsolationMode

__all__ = ["PendingMutation", "admit", "decide"]


@dataclass(frozen=True, slots=True)
class PendingMutation:
    """A pod that passed every check (§4 step 15): `complete(index)` makes it a TF pod."""

    pod: Mapping[str, Any]
    resolved: ResolvedWorkload
    warnings: tuple[str, ...]
    counter_increment: CounterIncrement | None
    native_resources: Mapping[str, str]
    keys: Keys
    dry_run: bool

    def complete(self, pod_index: int, warnings: Sequence[str] = ()) -> AdmissionDecision:
        """The mutated pod with index `pod_index`, its patch, and the workload to write."""
        keys = self.keys
        mutated = build_worker_pod(self.pod, self.resolved, pod_index=pod_index,
                                   native_resources=self.native_resources, keys=keys)  # fmt: skip
        container_gpu_count = mutated["metadata"]["annotations"].get(keys.container_gpu_count)
        resolved = self.resolved
        workload = WorkloadWrite(
            name=resolved.name,
            namespace=resolved.namespace,
            body=build_workload(resolved, keys, container_gpu_count),
        )
        return AdmissionDecision(
            allowed=True,
            outcome=AdmissionOutcome.MUTATED,
            patch=tuple(json_patch_diff(self.pod, mutated)),
            warnings=(*self.warnings, *warnings),
            mutated_pod=mutated,
            workload=workload,
            counter_increment=self.counter_increment,
            dry_run=self.dry_run,
        )


def admit(pod: Mapping[str, Any], facts: AdmissionFacts) -> AdmissionDecision:
    """Classify the pod and run the TF pipeline with the index of `facts`; never performs I/O,
    never mutates `pod`."""
    verdict = decide(pod, facts)
    if isinstance(verdict, PendingMutation):
        return verdict.complete(facts.pod_index)
    return verdict


def decide(pod: Mapping[str, Any], facts: AdmissionFacts) -> AdmissionDecision | PendingMutation:
    """Classify the pod and run the TF pipeline up to its index (`facts.pod_index` unread)."""
    keys = facts.keys
    claims = allocation_claims(pod, keys)
    if claims:  # on every route: no pod brings its own GPUs (allocation_claims.py)
        return _deny(claims, list(facts.warnings), facts)
    namespace = namespace_of(pod) or facts.namespace
    classification = classify(
        pod,
        namespace=namespace,
        native_resources=facts.native_resources,
        auto_migration=facts.auto_migration,
        namespace_labels=facts.namespace_labels,
        progressive_migration=facts.progressive_migration,
        keys=keys,
    )
    warnings = [*facts.warnings, *classification.warnings]
    if classification.route is Route.UNTOUCHED:
        return _untouched(pod, warnings, facts)
    if classification.route is Route.PROGRESSIVE:
        return _progressive(pod, warnings, facts)
    return _tf_pipeline(
        pod,
        facts,
        namespace=namespace,
        migrated=classification.route is Route.MIGRATE,
        has_native=classification.has_native_gpus,
        warnings=warnings,
    )


def _untouched(
    pod: Mapping[str, Any], warnings: list[str], facts: AdmissionFacts
) -> AdmissionDecision:
    return AdmissionDecision(
        allowed=True,
        outcome=AdmissionOutcome.UNTOUCHED,
        warnings=tuple(warnings),
        mutated_pod=pod,
        dry_run=facts.dry_run,
    )


def _progressive(
    pod: Mapping[str, Any], warnings: list[str], facts: AdmissionFacts
) -> AdmissionDecision:
    mutated, warning = with_progressive_scheduler(pod, facts.keys)
    if warning:
        warnings.append(warning)
    if mutated is None:
        return _untouched(pod, warnings, facts)
    return AdmissionDecision(
        allowed=True,
        outcome=AdmissionOutcome.SCHEDULER_ONLY,
        patch=tuple(json_patch_diff(pod, mutated)),
        warnings=tuple(warnings),
        mutated_pod=mutated,
        dry_run=facts.dry_run,
    )


def _not_treated(
    pod: Mapping[str, Any], has_native: bool, warnings: list[str], facts: AdmissionFacts
) -> AdmissionDecision:
    """§4 step 14: admitted as it came in, plus the progressive scheduler patch if it applies."""
    if has_native and facts.progressive_migration:
        return _progressive(pod, warnings, facts)
    return _untouched(pod, warnings, facts)


def _deny(problems: list[Problem], warnings: list[str], facts: AdmissionFacts) -> AdmissionDecision:
    return AdmissionDecision.deny(AnnotationError(problems), tuple(warnings), dry_run=facts.dry_run)


def _with_migration_isolation(pod: Mapping[str, Any], facts: AdmissionFacts) -> Mapping[str, Any]:
    """§3 step 3: `isolation=shared` unless the pod sets `isolation`."""
    keys = facts.keys
    annotations = annotations_of(pod)
    if keys.isolation in annotations:
        return pod
    working: dict[str, Any] = json_copy(pod)
    metadata = working.setdefault("metadata", {})
    metadata["annotations"] = {**annotations, keys.isolation: IsolationMode.SHARED.value}
    return working


def _tf_pipeline(
    pod: Mapping[str, Any],
    facts: AdmissionFacts,
    *,
    namespace: str,
    migrated: bool,
    has_native: bool,
    warnings: list[str],
) -> AdmissionDecision | PendingMutation:
    keys = facts.keys
    names = container_names(pod)
    if not names:
        return _deny([problem("pod has no containers (spec.containers)")], warnings, facts)
    working = _with_migration_isolation(pod, facts) if migrated else pod

    # Step 2: syntax of every annotation; later steps keep collecting.
    parsed, problems, found_warnings = validate_annotations(working, keys)
    warnings += found_warnings
    if parsed.enabled_replicas == 0:
        return _not_treated(pod, has_native, warnings, facts)

    # Steps 3-5: workload identity, profile, pool.
    identity = resolve_workload_identity(pod, facts.owners, facts.name_suffix)
    profile = ProfileSpec()
    if parsed.workload_profile is not None:
        found_profile = facts.profile
        invalid_profile = facts.invalid("WorkloadProfile").get(parsed.workload_profile)
        if invalid_profile is not None:
            problems += invalid_profile.problems
        elif found_profile is None or found_profile.metadata.name != parsed.workload_profile:
            problems.append(
                problem(
                    f'WorkloadProfile "{parsed.workload_profile}" not found in namespace '
                    f'"{namespace}" ({keys.workload_profile})',
                    about="workload-profile",
                )
            )
        else:
            profile = read_profile(found_profile)
    pool = resolve_pool(
        parsed.gpupool,
        profile.pool_name,
        profile.where,
        facts.pools,
        keys,
        invalid=facts.invalid("GPUPool"),
    )
    problems += pool.problems
    warnings += pool.warnings

    # Step 6: execution mode. Step 7: quota defaults. Step 8: resources and count.
    mode, found = resolve_execution_mode(parsed, profile, pool.name, pool.pool, keys)
    problems += found
    single = read_single_quota(facts.quota)
    warnings += [
        f"namespace quota not enforced: {quota.details}"
        for quota in facts.invalid("GPUResourceQuota").values()
    ]
    native = inspect_native_gpus(pod, facts.native_resources)
    problems += native.problems
    requests, limits, found = resolve_resources(
        fill_defaults(profile.requests, single.default_requests),
        fill_defaults(profile.limits, single.default_limits),
        parsed,
        full_gpu_limit=native.total > 0 and mode.isolation is not IsolationMode.SHARED,
        keys=keys,
    )
    problems += found
    gpu, found = resolve_count(
        parsed,
        profile.gpu_count,
        profile.gpu_indices,
        native,
        profile_field=profile.where,
        keys=keys,
    )
    problems += found

    # Step 9: autoscaling (declared).
    auto_scaling, found_warnings = autoscaling_config(parsed, profile.auto_scaling_config, keys)
    warnings += found_warnings

    # Step 10: containers.
    inject: tuple[str, ...] = ()
    if parsed.inject_container is not None or keys.inject_container not in parsed.raw:
        inject, found = resolve_injected_containers(
            parsed.inject_container, names, native.containers, keys
        )
        problems += found
    if inject:
        problems += native_injection_problems(native, inject, keys.inject_container)
    problems += mps_variable_problems(pod)
    warnings += mps_user_warnings(pod)

    # Step 11: model, vendor, dedicated GPU.
    model = parsed.gpu_model or profile.gpu_model
    vendor = parsed.vendor or native.vendor or profile.vendor
    soft_problem = soft_isolation_problem(mode.isolation, vendor, keys)
    if soft_problem is not None:
        problems.append(soft_problem)
    if parsed.dedicated_gpu:
        capacity, dedicated_problem = dedicated_gpu_capacity(model, facts.gpus, keys)
        warnings += skipped_gpu_warnings(model, facts.invalid("GPU").values(), keys)
        if dedicated_problem is not None:
            problems.append(dedicated_problem)
        if capacity is not None:
            requests = limits = capacity

    # Step 12: gang (declared).
    gang, found_warnings = gang_scheduling(parsed, profile.gang_scheduling, keys)
    warnings += found_warnings

    # Step 13: semantic checks, then deny if anything was found.
    if problems:
        return _deny(problems, warnings, facts)
    problems = semantic_problems(
        mode.isolation, requests=requests, limits=limits, count=gpu.count, quota=single, keys=keys
    )
    if problems:
        return _deny(problems, warnings, facts)

    # Step 14: enabled-replicas gate.
    gate = evaluate_gate(pod, parsed.enabled_replicas, facts.owners, namespace, keys)
    warnings += gate.warnings
    if gate.problem is not None:
        return _deny([gate.problem], warnings, facts)
    if not gate.tf_treatment:
        return _not_treated(pod, has_native, warnings, facts)

    # Step 15: QoS and the mutated pod; the workload to write (§12).
    labels = labels_of(pod)
    resolved = ResolvedWorkload(
        name=identity.name,
        namespace=namespace,
        pool=pool.name,
        pool_template_hash=client_config_hash(pool.pool),
        requests=requests,
        limits=limits,
        qos=derive_qos(parsed.qos, profile.qos, requests, limits, pool.pool),
        mode=mode,
        gpu=gpu,
        inject_containers=inject,
        gpu_model=model,
        vendor=vendor,
        auto_scaling_config=auto_scaling,
        gang_scheduling=gang,
        passthrough=profile.passthrough,
        controller=identity.controller,
        root=identity.root,
        pod_counter_key=gate.counter_key,
        auto_migrated=migrated,
        disable_features=parsed.raw.get(keys.disable_features) or labels.get(keys.disable_features),
    )
    return PendingMutation(
        pod=pod,
        resolved=resolved,
        warnings=tuple(warnings),
        counter_increment=gate.increment,
        native_resources=facts.native_resources,
        keys=keys,
        dry_run=facts.dry_run,
    )
