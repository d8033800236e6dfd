"""The chart's `schedulerConfig` (KubeSchedulerConfiguration v1): what we read, what we hand on.

`read_scheduler_settings` takes from the profile `<prefix>-scheduler` the GPU plugin arguments,
the NodeResourcesFit arguments and the score weights of NodeResourcesFit and GPUResourcesFit
(scheduling.md §7.1, §7.6, §10, §14). `derive_kube_scheduler_config` builds the configuration of
the stock kube-scheduler child (§14 steps 1-5, the extender stanza of §15). Configs are plain
dicts as YAML loads them; errors name the field path, the bad value and what is allowed.
"""

from __future__ import annotations

import copy
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
from tensorfusion.domain.vocabulary import TopologyMode, TopologySource, UnknownTopologyPolicy

__all__ = [
    "API_VERSION",
    "DEFAULT_PREFIX",
    "EXTENDERS_ERROR",
    "GPU_NETWORK_TOPOLOGY_AWARE",
    "GPU_PLUGINS",
    "GPU_RESOURCES_FIT",
    "KIND",
    "GPUResourcesFitArgs",
    "SchedulerConfigError",
    "SchedulerSettings",
    "ScoreWeights",
    "TopologyPluginArgs",
    "derive_kube_scheduler_config",
    "extender_stanza",
    "find_profile",
    "index_resource_names",
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
EXTENDERS_ERROR: Final = (
    "schedulerConfig.extenders is not supported: the controller adds its own extender"
)

_ROOT: Final = "schedulerConfig"
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
    """`GPUResourcesFit` args (§7.1); absent keys take these defaults, never 0."""

    max_worker_per_node: int = 256
    vram_weight: float = 0.7
    tflops_weight: float = 0.3


@dataclass(frozen=True, slots=True)
class TopologyPluginArgs:
    """`GPUNetworkTopologyAware` args (§10); an explicit `maxAllowedTier: 0` stays 0."""

    mode: TopologyMode = TopologyMode.SOFT
    topology_source: TopologySource = TopologySource.AUTO
    max_allowed_tier: int = 1
    unknown_topology_policy: UnknownTopologyPolicy = UnknownTopologyPolicy.TREAT_AS_WORST
    prefer_least_damage: bool = True


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Score weights of NodeResourcesFit (`wFit`) and GPUResourcesFit (`wGPU`), §7.6."""

    node_resources_fit: int = 1
    gpu_resources_fit: int = 1


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """What the controller, the extender and the simulator take from the profile."""

    scheduler_name: str
    gpu_resources_fit: GPUResourcesFitArgs = field(default_factory=GPUResourcesFitArgs)
    topology: TopologyPluginArgs = field(default_factory=TopologyPluginArgs)
    node_resources_fit: NodeResourcesFitArgs = field(default_factory=NodeResourcesFitArgs)
    """As the child kube-scheduler applies them: `ignoredResources` are the extender's
    `ignoredByScheduler` names (kube-scheduler replaces the configured list with them)."""
    score_weights: ScoreWeights = field(default_factory=ScoreWeights)
    warnings: tuple[str, ...] = ()


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
    _check_header(config)
    expected = scheduler_name(prefix)
    profiles = _profiles(config)
    found: list[str] = []
    matches: list[int] = []
    for index, profile in enumerate(profiles):
        name = _profile_name(profile, index)
        found.append(name)
        if name == expected:
            matches.append(index)
    if len(matches) > 1:
        raise SchedulerConfigError(
            f"{_ROOT}.profiles: profile {expected!r} appears {len(matches)} times "
            f"(at indices {', '.join(map(str, matches))}); scheduler names must be unique"
        )
    if not matches:
        names = ", ".join(repr(n) for n in found) or "none"
        raise SchedulerConfigError(
            f"{_ROOT}.profiles: no profile named {expected!r} "
            f"(schedulerName = TENSOR_FUSION_CUSTOM_DOMAIN_PREFIX {prefix!r} + '-scheduler'); "
            f"profiles found: {names}"
        )
    return matches[0], profiles[matches[0]]


def read_scheduler_settings(
    config: Mapping[str, Any], *, prefix: str = DEFAULT_PREFIX, domain: str | None = None
) -> SchedulerSettings:
    """Validate the config and read our profile's plugin args and score weights."""
    index, profile = find_profile(config, prefix)
    path = f"{_ROOT}.profiles[{index}]"
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


def extender_stanza(
    extender_url: str, managed_resources: Sequence[str], *, domain: str = "tensor-fusion.ai"
) -> dict[str, Any]:
    """Our `extenders[]` entry (§15): index resources ignored, native GPU names not."""
    index_names = index_resource_names(domain)
    managed = [{"name": name, "ignoredByScheduler": True} for name in index_names]
    seen = set(index_names)
    for name in managed_resources:
        if name not in seen:
            seen.add(name)
            managed.append({"name": name, "ignoredByScheduler": False})
    return {
        "urlPrefix": extender_url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 5,
        "enableHTTPS": False,
        "httpTimeout": "30s",
        "nodeCacheCapable": True,
        "ignorable": False,
        "managedResources": managed,
    }


def derive_kube_scheduler_config(
    config: Mapping[str, Any],
    *,
    prefix: str = DEFAULT_PREFIX,
    extender_url: str,
    managed_resources: Sequence[str],
    kubeconfig: str,
    domain: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The stock kube-scheduler's configuration (§14 steps 1-5) and the warnings to log.

    `managed_resources` are the native GPU resource names (`nvidia.com/gpu`, ...); the index
    resources of `domain` (default `<prefix>.ai`) are added as ignored by the scheduler.
    `kubeconfig` is "" in a pod and the controller's own kubeconfig out of cluster.
    """
    _check_header(config)
    extenders = config.get("extenders")
    if extenders:
        raise SchedulerConfigError(EXTENDERS_ERROR)
    read_scheduler_settings(config, prefix=prefix, domain=domain)
    index, _ = find_profile(config, prefix)
    warnings: list[str] = []

    derived: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    for key, value in config.items():
        if key not in derived:
            derived[key] = copy.deepcopy(value)

    profile_path = f"{_ROOT}.profiles[{index}]"
    _warn_replaced_ignored_resources(config["profiles"][index], profile_path, warnings)
    profiles: list[dict[str, Any]] = derived["profiles"]
    for profile in profiles:
        _remove_gpu_plugins(profile)
    ours = profiles[index]
    others = [_profile_name(p, i) for i, p in enumerate(profiles) if i != index]
    if others:
        warnings.append(
            f"{_ROOT}.profiles: only {scheduler_name(prefix)!r} is kept; dropped "
            f"{', '.join(repr(n) for n in others)} (they would compete with the cluster's "
            "own schedulers)"
        )
    derived["profiles"] = [ours]

    _set_percentage(derived, _ROOT, warnings)
    _set_percentage(ours, profile_path, warnings)

    leader_election = derived.get("leaderElection")
    derived["leaderElection"] = {
        **(leader_election if isinstance(leader_election, Mapping) else {}),
        "leaderElect": False,
    }
    client_connection = derived.get("clientConnection")
    derived["clientConnection"] = {
        **(client_connection if isinstance(client_connection, Mapping) else {}),
        "kubeconfig": kubeconfig,
    }
    derived["extenders"] = [
        extender_stanza(extender_url, managed_resources, domain=domain or f"{prefix}.ai")
    ]
    return derived, warnings


# --- reading -------------------------------------------------------------------------------


def _error(path: str, value: object, allowed: str) -> SchedulerConfigError:
    return SchedulerConfigError(f"{path}: invalid value {value!r}; allowed: {allowed}")


def _check_header(config: Mapping[str, Any]) -> None:
    if not isinstance(config, Mapping):
        raise _error(_ROOT, config, "a KubeSchedulerConfiguration object")
    api_version = config.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        raise _error(f"{_ROOT}.apiVersion", api_version, repr(API_VERSION))
    kind = config.get("kind")
    if kind is not None and kind != KIND:
        raise _error(f"{_ROOT}.kind", kind, repr(KIND))


def _profiles(config: Mapping[str, Any]) -> list[Any]:
    profiles = config.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise _error(f"{_ROOT}.profiles", profiles, "a non-empty list of profiles")
    for index, profile in enumerate(profiles):
        if not isinstance(profile, Mapping):
            raise _error(f"{_ROOT}.profiles[{index}]", profile, "a profile object")
    return profiles


def _profile_name(profile: Mapping[str, Any], index: int) -> str:
    name = profile.get("schedulerName")
    if name is None:
        return _DEFAULT_SCHEDULER_NAME
    if not isinstance(name, str) or not name:
        raise _error(f"{_ROOT}.profiles[{index}].schedulerName", name, "a non-empty string")
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


def _integer(path: str, value: object, low: int, high: int | None = None) -> int:
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
        max_workers = _integer(f"{path}.maxWorkerPerNode", args["maxWorkerPerNode"], 0)
    vram = defaults.vram_weight
    if _present(args, "vramWeight"):
        vram = _weight_number(f"{path}.vramWeight", args["vramWeight"])
    tflops = defaults.tflops_weight
    if _present(args, "tflopsWeight"):
        tflops = _weight_number(f"{path}.tflopsWeight", args["tflopsWeight"])
    return GPUResourcesFitArgs(max_workers, vram, tflops)


def _topology_args(
    entry: tuple[str, Mapping[str, Any]] | None, warnings: list[str]
) -> TopologyPluginArgs:
    defaults = TopologyPluginArgs()
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
    source = defaults.topology_source
    if _present(args, "topologySource"):
        allowed = [s.value for s in TopologySource]
        source = TopologySource(_choice(f"{path}.topologySource", args["topologySource"], allowed))
    tier = defaults.max_allowed_tier
    if _present(args, "maxAllowedTier"):
        tier = _integer(f"{path}.maxAllowedTier", args["maxAllowedTier"], 0, 3)
    policy = defaults.unknown_topology_policy
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
    return TopologyPluginArgs(mode, source, tier, policy, least_damage)


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
        value = 1 if weight is None or weight == 0 else _integer(f"{where}.weight", weight, 1, 100)
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
        utilization = _integer(
            f"{where}.utilization", item.get("utilization", 0), 0, MAX_UTILIZATION
        )
        score = _integer(f"{where}.score", item.get("score", 0), 0, MAX_CUSTOM_PRIORITY_SCORE)
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
                None if weight is None else _integer(f"{where}.weight", weight, 0)
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


def _remove_gpu_plugins(profile: dict[str, Any]) -> None:
    plugins = profile.get("plugins")
    if isinstance(plugins, dict):
        for point in list(plugins):
            body = plugins[point]
            if not isinstance(body, dict):
                continue
            for key in ("enabled", "disabled"):
                items = body.get(key)
                if not isinstance(items, list):
                    continue
                kept = [
                    i
                    for i in items
                    if not (isinstance(i, Mapping) and i.get("name") in GPU_PLUGINS)
                ]
                if kept:
                    body[key] = kept
                else:
                    del body[key]
            if not body:
                del plugins[point]
        if not plugins:
            del profile["plugins"]
    plugin_config = profile.get("pluginConfig")
    if isinstance(plugin_config, list):
        kept = [
            e
            for e in plugin_config
            if not (isinstance(e, Mapping) and e.get("name") in GPU_PLUGINS)
        ]
        if kept:
            profile["pluginConfig"] = kept
        else:
            del profile["pluginConfig"]


def _set_percentage(target: dict[str, Any], path: str, warnings: list[str]) -> None:
    key = "percentageOfNodesToScore"
    value = target.get(key)
    if value is None:
        target[key] = 100
        return
    percentage = _integer(f"{path}.{key}", value, 0, 100)
    if percentage < 100:
        warnings.append(
            f"{path}.{key} is {percentage}: kube-scheduler then stops filtering early and the "
            "extender misses nodes; 100 is recommended"
        )


def _warn_replaced_ignored_resources(
    profile: Mapping[str, Any], path: str, warnings: list[str]
) -> None:
    for i, entry in enumerate(profile.get("pluginConfig") or []):
        if not isinstance(entry, Mapping) or entry.get("name") != NODE_RESOURCES_FIT:
            continue
        args = entry.get("args")
        if isinstance(args, Mapping) and args.get("ignoredResources"):
            warnings.append(
                f"{path}.pluginConfig[{i}].args.ignoredResources is replaced by kube-scheduler "
                "with the extender's ignoredByScheduler resources (the index resources); "
                "use ignoredResourceGroups instead"
            )
