"""Which GPUPool a TF pod uses (admission.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tensorfusion.domain.annotation_errors import Problem, problem
from tensorfusion.domain.annotations import Keys
from tensorfusion.domain.model import GPUPool

__all__ = ["PoolResolution", "default_pool_names", "resolve_pool"]


@dataclass(frozen=True, slots=True)
class PoolResolution:
    """The chosen pool (name and object), or the problem that prevented a choice."""

    name: str = ""
    pool: GPUPool | None = None
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        """True when a pool was chosen."""
        return self.pool is not None and not self.problems


def default_pool_names(pools: Mapping[str, GPUPool], keys: Keys) -> list[str]:
    """Names of the pools annotated `is-default-pool: "true"`, sorted."""
    return sorted(
        name
        for name, pool in pools.items()
        if pool.metadata.annotations.get(keys.is_default_pool) == "true"
    )


def resolve_pool(
    annotation: str | None,
    profile_pool: str | None,
    profile_field: str,
    pools: Mapping[str, GPUPool],
    keys: Keys,
) -> PoolResolution:
    """`gpupool` annotation, else the profile's `poolName`, else the default pool."""
    if annotation is not None:
        if annotation in pools:
            return PoolResolution(annotation, pools[annotation])
        return PoolResolution(
            problems=(
                problem(f'GPU pool "{annotation}" not found ({keys.gpupool})', about="gpupool"),
            )
        )
    if profile_pool:
        if profile_pool in pools:
            return PoolResolution(profile_pool, pools[profile_pool])
        return PoolResolution(
            problems=(
                problem(
                    f'GPU pool "{profile_pool}" not found ({profile_field}.poolName)',
                    about="gpupool",
                ),
            )
        )
    defaults = default_pool_names(pools, keys)
    if not defaults:
        return PoolResolution(
            problems=(problem(f"no default GPU pool; set {keys.gpupool}", about="gpupool"),)
        )
    warnings: tuple[str, ...] = ()
    if len(defaults) > 1:
        warnings = (
            f"several default GPU pools ({', '.join(defaults)}); using {defaults[0]}; "
            f"set {keys.gpupool} to choose",
        )
    return PoolResolution(defaults[0], pools[defaults[0]], warnings=warnings)
