"""The stock kube-scheduler child's configuration, derived from the chart's `schedulerConfig`
(scheduling.md §14 steps 1-5) with our extender stanza (§15): our profile only, the GPU plugins
removed, leader election off, the controller's kubeconfig, and `percentageOfNodesToScore` 100.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tensorfusion.domain.scheduling.native.resources_fit import NODE_RESOURCES_FIT
from tensorfusion.domain.scheduling.scheduler_config import (
    API_VERSION,
    CONFIG_ROOT,
    DEFAULT_PREFIX,
    GPU_PLUGINS,
    KIND,
    SchedulerConfigError,
    check_header,
    find_profile,
    index_resource_names,
    integer_in_range,
    profile_name,
    read_scheduler_settings,
    scheduler_name,
)

__all__ = ["EXTENDERS_ERROR", "derive_kube_scheduler_config", "extender_stanza"]

EXTENDERS_ERROR: Final = (
    "schedulerConfig.extenders is not supported: the controller adds its own extender"
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
    check_header(config)
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

    profile_path = f"{CONFIG_ROOT}.profiles[{index}]"
    _warn_replaced_ignored_resources(config["profiles"][index], profile_path, warnings)
    profiles: list[dict[str, Any]] = derived["profiles"]
    for profile in profiles:
        _remove_gpu_plugins(profile)
    ours = profiles[index]
    others = [profile_name(p, i) for i, p in enumerate(profiles) if i != index]
    if others:
        warnings.append(
            f"{CONFIG_ROOT}.profiles: only {scheduler_name(prefix)!r} is kept; dropped "
            f"{', '.join(repr(n) for n in others)} (they would compete with the cluster's "
            "own schedulers)"
        )
    derived["profiles"] = [ours]

    _set_percentage(derived, CONFIG_ROOT, warnings)
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
    percentage = integer_in_range(f"{path}.{key}", value, 0, 100)
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
