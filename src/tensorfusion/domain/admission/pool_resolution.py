"""Which GPUPool a TF pod uses (admission.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tensorfusion.domain.admission.facts import InvalidObject
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
    *,
    invalid: Mapping[str, InvalidObject] | None = None,
) -> PoolResolution:
    """`gpupool` annotation, else the profile's `poolName`, else the default pool.

    `invalid`: pools that did not load, by name; choosing one is a problem naming its fields.
    """
    invalid = invalid or {}
    if annotation is not None:
        return _named(annotation, f"({keys.gpupool})", pools, invalid)
    if profile_pool:
        return _named(profile_pool, f"({profile_field}.poolName)", pools, invalid)
    defaults = sorted(
        {*default_pool_names(pools, keys), *(n for n, p in invalid.items() if p.default_pool)}
    )
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
    chosen = _named(defaults[0], "", pools, invalid)
    return PoolResolution(chosen.name, chosen.pool, chosen.problems, warnings)


def _named(
    name: str, source: str, pools: Mapping[str, GPUPool], invalid: Mapping[str, InvalidObject]
) -> PoolResolution:
    if name in pools:
        return PoolResolution(name, pools[name])
    if name in invalid:
        return PoolResolution(name, problems=invalid[name].problems)
    return PoolResolution(
        problems=(problem(f'GPU pool "{name}" not found {source}', about="gpupool"),)
    )
