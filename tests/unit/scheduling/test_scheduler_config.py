"""Reading `schedulerConfig` and deriving the stock kube-scheduler's configuration (§14)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.adapters.package_data import default_scheduler_config
from tensorfusion.domain.scheduling.kube_scheduler_config import (
    EXTENDERS_ERROR,
    derive_kube_scheduler_config,
    extender_stanza,
)
from tensorfusion.domain.scheduling.native import (
    NodeResourcesFitArgs,
    ResourceWeight,
    ScoringStrategy,
    ScoringStrategyType,
    ShapePoint,
)
from tensorfusion.domain.scheduling.placement import PlacementWeights
from tensorfusion.domain.scheduling.scheduler_config import (
    GPUResourcesFitArgs,
    SchedulerConfigError,
    ScoreWeights,
    find_profile,
    index_resource_names,
    read_scheduler_settings,
)
from tensorfusion.domain.topology import TopologyArgs
from tensorfusion.domain.vocabulary import TopologyMode, TopologySource, UnknownTopologyPolicy

URL = "http://127.0.0.1:8082/scheduler"


def minimal(**profile: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "tensor-fusion-scheduler", **profile}],
    }


def with_args(name: str, args: Any) -> dict[str, Any]:
    return minimal(pluginConfig=[{"name": name, "args": args}])


def derive(config: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    options: dict[str, Any] = {
        "extender_url": URL,
        "managed_resources": ["nvidia.com/gpu"],
        "kubeconfig": "",
    }
    options.update(kwargs)
    return derive_kube_scheduler_config(config, **options)


# --- default config ------------------------------------------------------------------------


def test_default_config_settings() -> None:
    settings = read_scheduler_settings(default_scheduler_config())
    assert settings.scheduler_name == "tensor-fusion-scheduler"
    assert settings.gpu_resources_fit == GPUResourcesFitArgs(256, PlacementWeights(0.7, 0.3))
    assert settings.topology == TopologyArgs()
    assert settings.score_weights == ScoreWeights(node_resources_fit=1, gpu_resources_fit=5)
    assert settings.node_resources_fit == NodeResourcesFitArgs(
        ignored_resources=frozenset(index_resource_names()),
        ignored_resource_groups=frozenset({"tensor-fusion.ai"}),
        scoring_strategy=ScoringStrategy(
            ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
            (
                ResourceWeight("cpu", 1),
                ResourceWeight("memory", 1),
                ResourceWeight("nvidia.com/gpu", 5),
            ),
            (ShapePoint(0, 0), ShapePoint(75, 9), ShapePoint(100, 10)),
        ),
    )
    assert settings.warnings == ()


GOLDEN_DEFAULT: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "clientConnection": {"kubeconfig": "", "qps": 1000, "burst": 2000},
    "profiles": [
        {
            "schedulerName": "tensor-fusion-scheduler",
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "ignoredResourceGroups": ["tensor-fusion.ai"],
                        "scoringStrategy": {
                            "type": "RequestedToCapacityRatio",
                            "resources": [
                                {"name": "cpu", "weight": 1},
                                {"name": "memory", "weight": 1},
                                {"name": "nvidia.com/gpu", "weight": 5},
                            ],
                            "requestedToCapacityRatio": {
                                "shape": [
                                    {"utilization": 0, "score": 0},
                                    {"utilization": 75, "score": 9},
                                    {"utilization": 100, "score": 10},
                                ]
                            },
                        },
                    },
                }
            ],
            "percentageOfNodesToScore": 100,
        }
    ],
    "percentageOfNodesToScore": 100,
    "leaderElection": {"leaderElect": False},
    "extenders": [
        {
            "urlPrefix": URL,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "weight": 5,
            "enableHTTPS": False,
            "httpTimeout": "30s",
            "nodeCacheCapable": True,
            "ignorable": False,
            "managedResources": [
                *(
                    {"name": f"tensor-fusion.ai/index_{d}", "ignoredByScheduler": True}
                    for d in "0123456789abcdef"
                ),
                {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
            ],
        }
    ],
}


def test_derive_default_golden() -> None:
    config = default_scheduler_config()
    original = copy.deepcopy(config)
    derived, warnings = derive(config)
    assert derived == GOLDEN_DEFAULT
    assert warnings == []
    assert config == original  # the input is not modified


def test_derive_out_of_cluster_kubeconfig_and_more_gpu_names() -> None:
    derived, _ = derive(
        default_scheduler_config(),
        kubeconfig="/tmp/kubeconfig",
        managed_resources=["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/gpu"],
    )
    assert derived["clientConnection"] == {
        "kubeconfig": "/tmp/kubeconfig",
        "qps": 1000,
        "burst": 2000,
    }
    names = [
        (r["name"], r["ignoredByScheduler"]) for r in derived["extenders"][0]["managedResources"]
    ]
    assert names[-2:] == [("nvidia.com/gpu", False), ("amd.com/gpu", False)]
    assert len(names) == 18


def test_custom_prefix_and_domain() -> None:
    config = default_scheduler_config()
    config["profiles"][0]["schedulerName"] = "acme-scheduler"
    settings = read_scheduler_settings(config, prefix="acme")
    assert settings.scheduler_name == "acme-scheduler"
    assert "acme.ai/index_0" in settings.node_resources_fit.ignored_resources
    stanza = extender_stanza(URL, [], domain="acme.io")
    assert stanza["managedResources"][15] == {"name": "acme.io/index_f", "ignoredByScheduler": True}


# --- profile lookup ------------------------------------------------------------------------


def test_missing_profile_names_both() -> None:
    config = minimal()
    config["profiles"] = [{"schedulerName": "other"}, {}]
    with pytest.raises(SchedulerConfigError) as info:
        read_scheduler_settings(config)
    message = str(info.value)
    assert "'tensor-fusion-scheduler'" in message
    assert "'other'" in message
    assert "'default-scheduler'" in message


def test_missing_profile_with_custom_prefix() -> None:
    with pytest.raises(SchedulerConfigError, match=r"'acme-scheduler'.*'tensor-fusion-scheduler'"):
        find_profile(minimal(), "acme")


def test_no_profiles() -> None:
    with pytest.raises(SchedulerConfigError, match=r"schedulerConfig\.profiles"):
        read_scheduler_settings({"apiVersion": "kubescheduler.config.k8s.io/v1"})


def test_duplicate_profile() -> None:
    config = minimal()
    config["profiles"].append({"schedulerName": "tensor-fusion-scheduler"})
    with pytest.raises(SchedulerConfigError, match="unique"):
        read_scheduler_settings(config)


def test_wrong_api_version() -> None:
    config = minimal()
    config["apiVersion"] = "kubescheduler.config.k8s.io/v1beta3"
    with pytest.raises(SchedulerConfigError, match=r"apiVersion.*v1beta3.*allowed"):
        read_scheduler_settings(config)


# --- plugin args ---------------------------------------------------------------------------


def test_absent_args_are_defaults_not_zero() -> None:
    settings = read_scheduler_settings(minimal())
    assert settings.gpu_resources_fit == GPUResourcesFitArgs(256, PlacementWeights(0.7, 0.3))
    assert settings.topology.max_allowed_tier == 1
    partial = read_scheduler_settings(with_args("GPUResourcesFit", {"maxWorkerPerNode": 8}))
    assert partial.gpu_resources_fit == GPUResourcesFitArgs(8, PlacementWeights(0.7, 0.3))
    empty = read_scheduler_settings(with_args("GPUResourcesFit", None))
    assert empty.gpu_resources_fit == GPUResourcesFitArgs()


def test_explicit_zero_tier_stays_zero() -> None:
    settings = read_scheduler_settings(with_args("GPUNetworkTopologyAware", {"maxAllowedTier": 0}))
    assert settings.topology.max_allowed_tier == 0


def test_topology_args() -> None:
    args = {
        "mode": "hard",
        "topologySource": "numa",
        "maxAllowedTier": 2,
        "unknownTopologyPolicy": "reject",
        "preferLeastDamage": False,
    }
    settings = read_scheduler_settings(with_args("GPUNetworkTopologyAware", args))
    assert settings.topology == TopologyArgs(
        TopologyMode.HARD, TopologySource.NUMA, 2, UnknownTopologyPolicy.REJECT, False
    )


@pytest.mark.parametrize(
    ("plugin", "args", "pattern"),
    [
        (
            "GPUNetworkTopologyAware",
            {"mode": "strict"},
            r"pluginConfig\[0\]\.args\.mode: invalid value 'strict'; allowed: soft \| hard",
        ),
        (
            "GPUNetworkTopologyAware",
            {"maxAllowedTier": 4},
            r"args\.maxAllowedTier: invalid value 4; allowed: an integer 0\.\.3",
        ),
        ("GPUNetworkTopologyAware", {"topologySource": "pci"}, r"auto \| numa \| vendor"),
        (
            "GPUNetworkTopologyAware",
            {"unknownTopologyPolicy": "ignore"},
            r"treat-as-worst \| reject",
        ),
        ("GPUNetworkTopologyAware", {"preferLeastDamage": "yes"}, r"true \| false"),
        ("GPUResourcesFit", {"vramWeight": -1}, r"args\.vramWeight: invalid value -1"),
        ("GPUResourcesFit", {"tflopsWeight": "0.3"}, r"args\.tflopsWeight"),
        ("GPUResourcesFit", {"maxWorkerPerNode": 1.5}, r"args\.maxWorkerPerNode"),
        ("GPUResourcesFit", ["x"], r"pluginConfig\[0\]\.args: invalid value"),
    ],
)
def test_invalid_gpu_args(plugin: str, args: Any, pattern: str) -> None:
    with pytest.raises(SchedulerConfigError, match=pattern):
        read_scheduler_settings(with_args(plugin, args))


def test_unknown_gpu_arg_warns() -> None:
    settings = read_scheduler_settings(with_args("GPUResourcesFit", {"vramWeigth": 0.5}))
    assert len(settings.warnings) == 1
    assert "args.vramWeigth: unknown argument" in settings.warnings[0]


def test_repeated_plugin_config() -> None:
    config = minimal(pluginConfig=[{"name": "GPUResourcesFit"}, {"name": "GPUResourcesFit"}])
    with pytest.raises(SchedulerConfigError, match="repeated config"):
        read_scheduler_settings(config)


def test_node_resources_fit_defaults_to_kube_default() -> None:
    fit = read_scheduler_settings(minimal()).node_resources_fit
    assert fit.scoring_strategy == ScoringStrategy()
    assert fit.ignored_resource_groups == frozenset()


def test_node_resources_fit_weights_default_to_one() -> None:
    args = {
        "scoringStrategy": {
            "type": "MostAllocated",
            "resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}],
        }
    }
    fit = read_scheduler_settings(with_args("NodeResourcesFit", args)).node_resources_fit
    assert fit.scoring_strategy == ScoringStrategy(
        ScoringStrategyType.MOST_ALLOCATED, (ResourceWeight("cpu", 1), ResourceWeight("memory", 1))
    )


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            {"scoringStrategy": {"type": "Balanced"}},
            r"scoringStrategy\.type: invalid value 'Balanced'; allowed: LeastAllocated \| "
            r"MostAllocated \| RequestedToCapacityRatio",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            r"requestedToCapacityRatio: invalid value None",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 50, "score": 1}, {"utilization": 40, "score": 2}]
                    },
                }
            },
            r"shape\[1\]\.utilization: invalid value 40",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 11}]},
                }
            },
            r"shape\[0\]\.score: invalid value 11; allowed: an integer 0\.\.10",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "resources": [{"name": "cpu", "weight": 101}],
                }
            },
            r"resources\[0\]\.weight: invalid value 101; allowed: an integer 1\.\.100",
        ),
        ({"ignoredResourceGroups": ["a/b"]}, r"ignoredResourceGroups\[0\]"),
        ({"ignoredResources": "nvidia.com/gpu"}, r"ignoredResources: invalid value"),
        ({"scoringstrategy": {}}, r"args\.scoringstrategy: unknown field"),
    ],
)
def test_invalid_node_resources_fit_args(args: dict[str, Any], pattern: str) -> None:
    with pytest.raises(SchedulerConfigError, match=pattern):
        read_scheduler_settings(with_args("NodeResourcesFit", args))


def test_user_ignored_resources_are_replaced_by_extender_names() -> None:
    config = with_args("NodeResourcesFit", {"ignoredResources": ["example.com/foo"]})
    fit = read_scheduler_settings(config).node_resources_fit
    assert fit.ignored_resources == frozenset(index_resource_names())
    _, warnings = derive(config)
    assert any("ignoredResources is replaced" in w for w in warnings)


# --- score weights -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plugins", "weights"),
    [
        (None, ScoreWeights(1, 1)),
        ({"score": {"enabled": [{"name": "GPUResourcesFit", "weight": 5}]}}, ScoreWeights(1, 5)),
        ({"score": {"enabled": [{"name": "GPUResourcesFit"}]}}, ScoreWeights(1, 1)),
        ({"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 3}]}}, ScoreWeights(3, 1)),
        ({"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 0}]}}, ScoreWeights(1, 1)),
        (
            {
                "multiPoint": {
                    "enabled": [
                        {"name": "GPUResourcesFit", "weight": 4},
                        {"name": "NodeResourcesFit", "weight": 2},
                    ]
                }
            },
            ScoreWeights(2, 4),
        ),
        # the specific extension point overrides multiPoint
        (
            {
                "multiPoint": {"enabled": [{"name": "GPUResourcesFit", "weight": 4}]},
                "score": {"enabled": [{"name": "GPUResourcesFit", "weight": 7}]},
            },
            ScoreWeights(1, 7),
        ),
        ({"score": {"disabled": [{"name": "NodeResourcesFit"}]}}, ScoreWeights(0, 1)),
        ({"score": {"disabled": [{"name": "*"}]}}, ScoreWeights(0, 1)),
        (
            {
                "score": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "NodeResourcesFit", "weight": 2}],
                }
            },
            ScoreWeights(2, 1),
        ),
        ({"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}, ScoreWeights(0, 1)),
        (
            {
                "multiPoint": {"enabled": [{"name": "GPUResourcesFit", "weight": 4}]},
                "score": {"disabled": [{"name": "GPUResourcesFit"}]},
            },
            ScoreWeights(1, 0),
        ),
    ],
)
def test_score_weights(plugins: dict[str, Any] | None, weights: ScoreWeights) -> None:
    config = minimal() if plugins is None else minimal(plugins=plugins)
    assert read_scheduler_settings(config).score_weights == weights


def test_bad_weight_and_extension_point() -> None:
    with pytest.raises(
        SchedulerConfigError, match=r"score\.enabled\[0\]\.weight: invalid value -1"
    ):
        read_scheduler_settings(
            minimal(plugins={"score": {"enabled": [{"name": "GPUResourcesFit", "weight": -1}]}})
        )
    with pytest.raises(SchedulerConfigError, match=r"plugins\.scoring: .*allowed: multiPoint"):
        read_scheduler_settings(minimal(plugins={"scoring": {}}))


# --- derivation ----------------------------------------------------------------------------


def test_user_extenders_rejected() -> None:
    config = default_scheduler_config()
    config["extenders"] = [{"urlPrefix": "http://elsewhere"}]
    with pytest.raises(SchedulerConfigError) as info:
        derive(config)
    assert str(info.value) == EXTENDERS_ERROR
    assert EXTENDERS_ERROR == (
        "schedulerConfig.extenders is not supported: the controller adds its own extender"
    )


def test_empty_extenders_list_is_fine() -> None:
    config = default_scheduler_config()
    config["extenders"] = []
    derived, _ = derive(config)
    assert len(derived["extenders"]) == 1


def test_other_profiles_dropped_with_warning() -> None:
    config = default_scheduler_config()
    config["profiles"].insert(0, {"schedulerName": "default-scheduler"})
    config["profiles"].append(
        {
            "schedulerName": "batch",
            "plugins": {"filter": {"enabled": [{"name": "GPUResourcesFit"}]}},
        }
    )
    derived, warnings = derive(config)
    assert [p["schedulerName"] for p in derived["profiles"]] == ["tensor-fusion-scheduler"]
    assert len(warnings) == 1
    assert "'default-scheduler', 'batch'" in warnings[0]


def test_gpu_plugins_removed_everywhere_others_kept() -> None:
    config = minimal(
        plugins={
            "multiPoint": {
                "enabled": [{"name": "GPUResourcesFit", "weight": 5}, {"name": "MyPlugin"}],
                "disabled": [{"name": "GPUNetworkTopologyAware"}],
            },
            "filter": {
                "enabled": [{"name": "GPUNetworkTopologyAware"}],
                "disabled": [{"name": "GPUResourcesFit"}],
            },
            "score": {
                "enabled": [{"name": "NodeResourcesFit", "weight": 2}],
                "disabled": [{"name": "NodeResourcesBalancedAllocation"}],
            },
        },
        pluginConfig=[
            {"name": "GPUNetworkTopologyAware", "args": {"mode": "hard"}},
            {"name": "NodeAffinity", "args": {}},
        ],
    )
    derived, _ = derive(config)
    profile = derived["profiles"][0]
    assert profile["plugins"] == {
        "multiPoint": {"enabled": [{"name": "MyPlugin"}]},
        "score": {
            "enabled": [{"name": "NodeResourcesFit", "weight": 2}],
            "disabled": [{"name": "NodeResourcesBalancedAllocation"}],
        },
    }
    assert profile["pluginConfig"] == [{"name": "NodeAffinity", "args": {}}]


def test_percentage_kept_when_set_with_warning_below_100() -> None:
    config = default_scheduler_config()
    config["percentageOfNodesToScore"] = 50
    config["profiles"][0]["percentageOfNodesToScore"] = 100
    derived, warnings = derive(config)
    assert derived["percentageOfNodesToScore"] == 50
    assert derived["profiles"][0]["percentageOfNodesToScore"] == 100
    assert len(warnings) == 1
    assert warnings[0].startswith("schedulerConfig.percentageOfNodesToScore is 50")


def test_percentage_out_of_range() -> None:
    config = default_scheduler_config()
    config["profiles"][0]["percentageOfNodesToScore"] = 150
    with pytest.raises(
        SchedulerConfigError, match=r"profiles\[0\]\.percentageOfNodesToScore: invalid value 150"
    ):
        derive(config)


def test_leader_election_forced_off_and_other_keys_kept() -> None:
    config = default_scheduler_config()
    config["leaderElection"] = {"leaderElect": True, "resourceName": "x"}
    config["parallelism"] = 32
    derived, _ = derive(config)
    assert derived["leaderElection"] == {"leaderElect": False, "resourceName": "x"}
    assert derived["parallelism"] == 32


def test_derive_validates_args() -> None:
    with pytest.raises(SchedulerConfigError, match="maxAllowedTier"):
        derive(with_args("GPUNetworkTopologyAware", {"maxAllowedTier": 9}))


def test_derive_fills_api_version_and_kind() -> None:
    config = {"profiles": [{"schedulerName": "tensor-fusion-scheduler"}]}
    derived, _ = derive(config)
    assert derived["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert derived["kind"] == "KubeSchedulerConfiguration"
    assert derived["clientConnection"] == {"kubeconfig": ""}


DERIVED = Path(__file__).resolve().parent / "data" / "derived"


@pytest.mark.parametrize("name", ["default", "guide-tuned", "multipoint"])
def test_derived_configuration_golden_files(name: str) -> None:
    """The chart's default, the guide's tuned profile and a multiPoint profile (with another
    profile dropped); the cluster tier starts the real kube-scheduler from each."""
    config = yaml.safe_load((DERIVED / f"{name}.input.yaml").read_text())
    derived, warnings = derive_kube_scheduler_config(
        config, extender_url="http://127.0.0.1:8082/scheduler",
        managed_resources=["nvidia.com/gpu"], kubeconfig="",
    )  # fmt: skip
    assert derived == yaml.safe_load((DERIVED / f"{name}.derived.yaml").read_text())
    assert len(warnings) == (1 if name == "multipoint" else 0)
