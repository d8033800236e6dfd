"""The chart's `schedulerConfig` (KubeSchedulerConfiguration v1): what we read, what we hand on.

`read_scheduler_settings` takes from the profile `<prefix>-scheduler` the GPU plugin arguments,
the NodeResourcesFit arguments and the score weights of NodeResourcesFit and GPUResourcesFit
(scheduling.md §7.1, §7.6, §10, §14). The child kube-scheduler's configuration is derived in
`kube_scheduler_config`. Configs are plain dicts as YAML loads them; errors name the field
path, the bad value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from tensorfusion.domain.scheduling.native.resources_fit import (
    DEFAULT_RESOURCE_WEIGHTS,
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    NODE_RESOURCES_FIT,
    NodeResourcesFitArgs,
    ResourceWeight,
    ScoringStrategy,
    ScoringStrategyType,
    ShapePoint,
)
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import TopologyMode, TopologySource, UnknownTopologyPolicy

__all__ = [
    "API_VERSION",
    "CONFIG_ROOT",
    "DEFAULT_PREFIX",
    "GPU_NETWORK_TOPOLOGY_AWARE",
    "GPU_PLUGINS",
    "GPU_RESOURCES_FIT",
    "KIND",
    "GPUResourcesFitArgs",
    "SchedulerConfigError",
    "SchedulerSettings",
    "SchedulingProfile",
    "ScoreWeights",
    "check_header",
    "find_profile",
    "index_resource_names",
    "integer_in_range",
    "profile_name",
    "read_scheduler_settings",
    "scheduler_config_from_yaml",
    "scheduler_name",
]

API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
KIND: Final = "KubeSchedulerConfiguration"
DEFAULT_PREFIX: Final = "tensor-fusion"
GPU_RESOURCES_FIT: Final = "GPUResourcesFit"
GPU_NETWORK_TOPOLOGY_AWARE: Final = "GPUNetworkTopologyAware"
GPU_PLUGINS: Final = frozenset({GPU_RESOURCES_FIT, GPU_NETWORK_TOPOLOGY_AWARE})

CONFIG_ROOT: Final = "schedulerConfig"
_DEFAULT_SCHEDULER_NAME: Final = "default-scheduler"
_EXTENSION_POINTS: Final = (
    "multiPoint",
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)
_TYPED_ARGS_KEYS: Final = ("apiVersion", "kind")
_HEX_DIGITS: Final = "0123456789abcdef"


class SchedulerConfigError(ValueError):
    """An unusable `schedulerConfig`; the message names the field path."""


@dataclass(frozen=True, slots=True)
class GPUResourcesFitArgs:
    """`GPUResourcesFit` args (§7.1); absent keys take these defaults, never 0 (the weights'
    defaults are `PlacementWeights`')."""

    max_worker_per_node: int = 256
    weights: PlacementWeights = field(default_factory=PlacementWeights)


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Score weights of NodeResourcesFit (`wFit`) and GPUResourcesFit (`wGPU`), §7.6."""

    node_resources_fit: int = 1
    gpu_resources_fit: int = 1


@dataclass(frozen=True, slots=True)
class SchedulingProfile:
    """What one GPU decision takes from the scheduler profile: the arguments of the GPU
    plugins (`GPUResourcesFit`, `GPUNetworkTopologyAware`, §10: `TopologyArgs`) and the
    score weights."""

    gpu_fit: GPUResourcesFitArgs = field(default_factory=GPUResourcesFitArgs)
    topology: TopologyArgs = field(default_factory=TopologyArgs)
    weights: ScoreWeights = field(default_factory=ScoreWeights)


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """What the controller, the extender and the simulator take from the profile."""

    scheduler_name: str
    gpu_resources_fit: GPUResourcesFitArgs = field(default_factory=GPUResourcesFitArgs)
    topology: TopologyArgs = field(default_factory=TopologyArgs)
    node_resources_fit: NodeResourcesFitArgs = field(default_factory=NodeResourcesFitArgs)
    """As the child kube-scheduler applies them: `ignoredResources` are the extender's
    `ignoredByScheduler` names (kube-scheduler replaces the configured list with them)."""
    score_weights: ScoreWeights = field(default_factory=ScoreWeights)
    warnings: tuple[str, ...] = ()

    @property
    def profile(self) -> SchedulingProfile:
        """The part of the settings a GPU decision takes."""
        return SchedulingProfile(self.gpu_resources_fit, self.topology, self.score_weights)


def scheduler_name(prefix: str = DEFAULT_PREFIX) -> str:
    """The profile name our pods use: `<prefix>-scheduler`."""
    return f"{prefix}-scheduler"


def index_resource_names(domain: str = "tensor-fusion.ai") -> tuple[str, ...]:
    """`<domain>/index_0` … `<domain>/index_f` (api.md §6)."""
    return tuple(f"{domain}/index_{digit}" for digit in _HEX_DIGITS)


def scheduler_config_from_yaml(text: str, source: str) -> dict[str, Any]:
    """A `schedulerConfig` document read from YAML text; `source` names it in errors."""
    loaded = yaml.safe_load(text)
    if not isinstance(loaded, dict):
        raise SchedulerConfigError(f"{source}: not a mapping")
    return loaded


def find_profile(
    config: Mapping[str, Any], prefix: str = DEFAULT_PREFIX
) -> tuple[int, Mapping[str, Any]]:
    """Index and body of the profile `<prefix>-scheduler`; an error names both name sets."""
    check_header(config)
    expected = scheduler_name(prefix)
    profiles = _profiles(config)
    found: list[str] = []
    matches: list[int] = []
    for index, profile in enumerate(profiles):
        name = profile_name(profile, index)
        found.append(name)
        if name == expected:
            matches.append(index)
    if len(matches) > 1:
        raise SchedulerConfigError(
            f"{CONFIG_ROOT}.profiles: profile {expected!r} appears {len(matches)} times "
            f"(at indices {', '.join(map(str, matches))}); scheduler names must be unique"
        )
    if not matches:
        names = ", ".join(repr(n) for n in found) or "none"
        raise SchedulerConfigError(
            f"{CONFIG_ROOT}.profiles: no profile named {expected!r} "
            f"(schedulerName = TENSOR_FUSION_CUSTOM_DOMAIN_PREFIX {prefix!r} + '-scheduler'); "
            f"profiles found: {names}"
        )
    return matches[0], profiles[matches[0]]


def read_scheduler_settings(
    config: Mapping[str, Any], *, prefix: str = DEFAULT_PREFIX, domain: str | None = None
) -> SchedulerSettings:
    """Validate the config and read our profile's plugin args and score weights."""
    index, profile = find_profile(config, prefix)
    path = f"{CONFIG_ROOT}.profiles[{index}]"
    warnings: list[str] = []
    entries = _plugin_config(profile, path)
    gpu_fit = _gpu_resources_fit_args(entries.get(GPU_RESOURCES_FIT), warnings)
    topology = _topology_args(entries.get(GPU_NETWORK_TOPOLOGY_AWARE), warnings)
    fit = _node_resources_fit_args(entries.get(NODE_RESOURCES_FIT))
    fit = fit.with_ignored_resources(index_resource_names(domain or f"{prefix}.ai"))
    weights = _score_weights(profile.get("plugins"), f"{path}.plugins")
    return SchedulerSettings(
        scheduler_name=scheduler_name(prefix),
        gpu_resources_fit=gpu_fit,
        topology=topology,
        node_resources_fit=fit,
        score_weights=weights,
        warnings=tuple(warnings),
    )


# --- reading -------------------------------------------------------------------------------


def _error(path: str, value: object, allowed: str) -> SchedulerConfigError:
    return SchedulerConfigError(f"{path}: invalid value {value!r}; allowed: {allowed}")


def check_header(config: Mapping[str, Any]) -> None:
    if not isinstance(config, Mapping):
        raise _error(CONFIG_ROOT, config, "a KubeSchedulerConfiguration object")
    api_version = config.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        raise _error(f"{CONFIG_ROOT}.apiVersion", api_version, repr(API_VERSION))
    kind = config.get("kind")
    if kind is not None and kind != KIND:
        raise _error(f"{CONFIG_ROOT}.kind", kind, repr(KIND))


def _profiles(config: Mapping[str, Any]) -> list[Any]:
    profiles = config.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise _error(f"{CONFIG_ROOT}.profiles", profiles, "a non-empty list of profiles")
    for index, profile in enumerate(profiles):
        if not isinstance(profile, Mapping):
            raise _error(f"{CONFIG_ROOT}.profiles[{index}]", profile, "a profile object")
    return profiles


def profile_name(profile: Mapping[str, Any], index: int) -> str:
    name = profile.get("schedulerName")
    if name is None:
        return _DEFAULT_SCHEDULER_NAME
    if not isinstance(name, str) or not name:
        raise _error(f"{CONFIG_ROOT}.profiles[{index}].schedulerName", name, "a non-empty string")
    return name


def _plugin_config(
    profile: Mapping[str, Any], path: str
) -> dict[str, tuple[str, Mapping[str, Any]]]:
    raw = profile.get("pluginConfig")
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _error(f"{path}.pluginConfig", raw, "a list of {name, args}")
    entries: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for i, entry in enumerate(raw):
        where = f"{path}.pluginConfig[{i}]"
        if not isinstance(entry, Mapping):
            raise _error(where, entry, "an object {name, args}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise _error(f"{where}.name", name, "a plugin name")
        if name in entries:
            raise SchedulerConfigError(f"{where}.name: repeated config for plugin {name!r}")
        args = entry.get("args")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise _error(f"{where}.args", args, "an object")
        entries[name] = (f"{where}.args", args)
    return entries


def _present(args: Mapping[str, Any], key: str) -> bool:
    return args.get(key) is not None


def _unknown_keys(
    path: str, args: Mapping[str, Any], known: Sequence[str], warnings: list[str]
) -> None:
    for key in args:
        if key not in known and key not in _TYPED_ARGS_KEYS:
            warnings.append(f"{path}.{key}: unknown argument, ignored; known: {', '.join(known)}")


def integer_in_range(path: str, value: object, low: int, high: int | None = None) -> int:
    allowed = f"an integer {low}..{high}" if high is not None else f"an integer >= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise _error(path, value, allowed)
    if value < low or (high is not None and value > high):
        raise _error(path, value, allowed)
    return value


def _weight_number(path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _error(path, value, "a number >= 0")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise _error(path, value, "a number >= 0")
    return number


def _choice(path: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _error(path, value, " | ".join(allowed))
    return value


def _gpu_resources_fit_args(
    entry: tuple[str, Mapping[str, Any]] | None, warnings: list[str]
) -> GPUResourcesFitArgs:
    defaults = GPUResourcesFitArgs()
    if entry is None:
        return defaults
    path, args = entry
    _unknown_keys(path, args, ("maxWorkerPerNode", "vramWeight", "tflopsWeight"), warnings)
    max_workers = defaults.max_worker_per_node
    if _present(args, "maxWorkerPerNode"):
        max_workers = integer_in_range(f"{path}.maxWorkerPerNode", args["maxWorkerPerNode"], 0)
    vram = defaults.weights.vram
    if _present(args, "vramWeight"):
        vram = _weight_number(f"{path}.vramWeight", args["vramWeight"])
    tflops = defaults.weights.tflops
    if _present(args, "tflopsWeight"):
        tflops = _weight_number(f"{path}.tflopsWeight", args["tflopsWeight"])
    return GPUResourcesFitArgs(max_workers, PlacementWeights(vram=vram, tflops=tflops))


def _topology_args(
    entry: tuple[str, Mapping[str, Any]] | None, warnings: list[str]
) -> TopologyArgs:
    defaults = TopologyArgs()
    if entry is None:
        return defaults
    path, args = entry
    known = (
        "mode",
        "topologySource",
        "maxAllowedTier",
        "unknownTopologyPolicy",
        "preferLeastDamage",
    )
    _unknown_keys(path, args, known, warnings)
    mode = defaults.mode
    if _present(args, "mode"):
        mode = TopologyMode(_choice(f"{path}.mode", args["mode"], [m.value for m in TopologyMode]))
    source = defaults.source
    if _present(args, "topologySource"):
        allowed = [s.value for s in TopologySource]
        source = TopologySource(_choice(f"{path}.topologySource", args["topologySource"], allowed))
    tier = defaults.max_allowed_tier
    if _present(args, "maxAllowedTier"):
        tier = integer_in_range(f"{path}.maxAllowedTier", args["maxAllowedTier"], 0, 3)
    policy = defaults.unknown_policy
    if _present(args, "unknownTopologyPolicy"):
        allowed = [p.value for p in UnknownTopologyPolicy]
        policy = UnknownTopologyPolicy(
            _choice(f"{path}.unknownTopologyPolicy", args["unknownTopologyPolicy"], allowed)
        )
    least_damage = defaults.prefer_least_damage
    if _present(args, "preferLeastDamage"):
        value = args["preferLeastDamage"]
        if not isinstance(value, bool):
            raise _error(f"{path}.preferLeastDamage", value, "true | false")
        least_damage = value
    return TopologyArgs(mode, source, tier, policy, least_damage)


def _string_list(path: str, value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _error(path, value, "a list of non-empty strings")
    return list(value)


def _node_resources_fit_args(entry: tuple[str, Mapping[str, Any]] | None) -> NodeResourcesFitArgs:
    if entry is None:
        return NodeResourcesFitArgs()
    path, args = entry
    known = ("ignoredResources", "ignoredResourceGroups", "scoringStrategy")
    for key in args:
        if key not in known and key not in _TYPED_ARGS_KEYS:
            raise SchedulerConfigError(
                f"{path}.{key}: unknown field (kube-scheduler rejects it); "
                f"allowed: {', '.join(known)}"
            )
    ignored = _string_list(f"{path}.ignoredResources", args.get("ignoredResources"))
    groups = _string_list(f"{path}.ignoredResourceGroups", args.get("ignoredResourceGroups"))
    for i, group in enumerate(groups):
        if "/" in group:
            raise _error(
                f"{path}.ignoredResourceGroups[{i}]", group, "a resource group without '/'"
            )
    strategy = _scoring_strategy(f"{path}.scoringStrategy", args.get("scoringStrategy"))
    return NodeResourcesFitArgs(frozenset(ignored), frozenset(groups), strategy)


def _scoring_strategy(path: str, raw: object) -> ScoringStrategy:
    if raw is None:
        return ScoringStrategy()
    if not isinstance(raw, Mapping):
        raise _error(path, raw, "an object {type, resources, requestedToCapacityRatio}")
    known = ("type", "resources", "requestedToCapacityRatio")
    for key in raw:
        if key not in known:
            raise SchedulerConfigError(
                f"{path}.{key}: unknown field (kube-scheduler rejects it); "
                f"allowed: {', '.join(known)}"
            )
    kind = ScoringStrategyType(
        _choice(f"{path}.type", raw.get("type"), [t.value for t in ScoringStrategyType])
    )
    resources = _resource_weights(f"{path}.resources", raw.get("resources"))
    shape: tuple[ShapePoint, ...] = ()
    if kind is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
        ratio = raw.get("requestedToCapacityRatio")
        if not isinstance(ratio, Mapping):
            raise _error(
                f"{path}.requestedToCapacityRatio",
                ratio,
                "an object {shape: [{utilization, score}]} (required for RequestedToCapacityRatio)",
            )
        shape = _shape(f"{path}.requestedToCapacityRatio.shape", ratio.get("shape"))
    return ScoringStrategy(kind, resources, shape)


def _resource_weights(path: str, raw: object) -> tuple[ResourceWeight, ...]:
    if raw is None:
        return DEFAULT_RESOURCE_WEIGHTS
    if not isinstance(raw, list):
        raise _error(path, raw, "a list of {name, weight}")
    if not raw:
        return DEFAULT_RESOURCE_WEIGHTS
    weights: list[ResourceWeight] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise _error(where, item, "an object {name, weight}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise _error(f"{where}.name", name, "a resource name")
        if name in seen:
            raise SchedulerConfigError(f"{where}.name: resource {name!r} is listed twice")
        seen.add(name)
        weight = item.get("weight")
        value = (
            1
            if weight is None or weight == 0
            else integer_in_range(f"{where}.weight", weight, 1, 100)
        )
        weights.append(ResourceWeight(name, value))
    return tuple(weights)


def _shape(path: str, raw: object) -> tuple[ShapePoint, ...]:
    if not isinstance(raw, list) or not raw:
        raise _error(path, raw, "a non-empty list of {utilization, score}")
    points: list[ShapePoint] = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise _error(where, item, "an object {utilization, score}")
        utilization = integer_in_range(
            f"{where}.utilization", item.get("utilization", 0), 0, MAX_UTILIZATION
        )
        score = integer_in_range(
            f"{where}.score", item.get("score", 0), 0, MAX_CUSTOM_PRIORITY_SCORE
        )
        if points and utilization <= points[-1].utilization:
            raise _error(
                f"{where}.utilization",
                utilization,
                f"a value above the previous point's {points[-1].utilization} "
                "(utilizations strictly increase)",
            )
        points.append(ShapePoint(utilization, score))
    return tuple(points)


@dataclass(slots=True)
class _PluginSet:
    enabled: dict[str, int | None] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)

    def disables(self, name: str) -> bool:
        return name in self.disabled or "*" in self.disabled


def _plugin_sets(plugins: object, path: str) -> dict[str, _PluginSet]:
    if plugins is None:
        return {}
    if not isinstance(plugins, Mapping):
        raise _error(path, plugins, "an object of extension points")
    sets: dict[str, _PluginSet] = {}
    for point, body in plugins.items():
        if point not in _EXTENSION_POINTS:
            raise _error(f"{path}.{point}", point, ", ".join(_EXTENSION_POINTS))
        sets[point] = _plugin_set(body, f"{path}.{point}")
    return sets


def _plugin_set(body: object, path: str) -> _PluginSet:
    result = _PluginSet()
    if body is None:
        return result
    if not isinstance(body, Mapping):
        raise _error(path, body, "an object {enabled, disabled}")
    for key in ("enabled", "disabled"):
        items = body.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise _error(f"{path}.{key}", items, "a list of {name, weight}")
        for i, item in enumerate(items):
            where = f"{path}.{key}[{i}]"
            if not isinstance(item, Mapping):
                raise _error(where, item, "an object {name, weight}")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise _error(f"{where}.name", name, "a plugin name")
            if key == "disabled":
                result.disabled.add(name)
                continue
            weight = item.get("weight")
            result.enabled[name] = (
                None if weight is None else integer_in_range(f"{where}.weight", weight, 0)
            )
    return result


def _score_weights(plugins: object, path: str) -> ScoreWeights:
    sets = _plugin_sets(plugins, path)
    multi = sets.get("multiPoint", _PluginSet())
    score = sets.get("score", _PluginSet())
    return ScoreWeights(
        node_resources_fit=_score_weight(NODE_RESOURCES_FIT, multi, score, default_plugin=True),
        gpu_resources_fit=_score_weight(GPU_RESOURCES_FIT, multi, score, default_plugin=False),
    )


def _score_weight(name: str, multi: _PluginSet, score: _PluginSet, *, default_plugin: bool) -> int:
    """kube-scheduler's weight of a score plugin; 0 when it does not score, 0 or absent → 1."""
    if name in score.enabled:
        return score.enabled[name] or 1
    if name in multi.enabled:
        return 0 if score.disables(name) else multi.enabled[name] or 1
    if default_plugin:
        # NodeResourcesFit is in kube-scheduler's default multiPoint set with weight 1.
        return 0 if multi.disables(name) or score.disables(name) else 1
    # A plugin named nowhere counts with weight 1 (§7.6), unless disabled by name.
    return 0 if name in multi.disabled or name in score.disabled else 1


# --- deriving ------------------------------------------------------------------------------
