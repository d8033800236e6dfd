"""The generated CRDs: names, scope, structural schemas, printer columns, committed files."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tensorfusion.cli.crds import differing_files, gen_crds, write_crds
from tensorfusion.domain.model import KINDS, build_crd, crd_file_name, kind_info, render_crds
from tensorfusion.domain.model.crd_schema import QUANTITY_PATTERN

CHART_CRDS = Path(__file__).resolve().parents[3] / "charts" / "tensor-fusion" / "crds"

EXPECTED_NAMES = {
    "TensorFusionCluster": ("tensorfusionclusters", "Cluster"),
    "GPUPool": ("gpupools", "Cluster"),
    "GPUNode": ("gpunodes", "Cluster"),
    "GPU": ("gpus", "Cluster"),
    "SchedulingConfigTemplate": ("schedulingconfigtemplates", "Cluster"),
    "WorkloadProfile": ("workloadprofiles", "Namespaced"),
    "TensorFusionWorkload": ("tensorfusionworkloads", "Namespaced"),
    "GPUResourceQuota": ("gpuresourcequotas", "Namespaced"),
    "ProviderConfig": ("providerconfigs", "Cluster"),
    "GPUNodeClaim": ("gpunodeclaims", "Cluster"),
    "GPUNodeClass": ("gpunodeclasses", "Cluster"),
    "TensorFusionConnection": ("tensorfusionconnections", "Namespaced"),
}


def _schema(kind: str) -> dict[str, Any]:
    crd = build_crd(kind_info(kind))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_files_match_the_generator() -> None:
    expected = render_crds()
    committed = {path.name: path.read_text(encoding="utf-8") for path in CHART_CRDS.glob("*.yaml")}
    assert sorted(committed) == sorted(expected), "run `make crds`"
    for name, text in expected.items():
        assert committed[name] == text, f"{name} is stale: run `make crds`"


def test_all_twelve_kinds_with_their_names_and_scope() -> None:
    assert {info.kind for info in KINDS} == set(EXPECTED_NAMES)
    for info in KINDS:
        crd = build_crd(info)
        plural, scope = EXPECTED_NAMES[info.kind]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["metadata"]["name"] == f"{plural}.tensor-fusion.ai"
        spec = crd["spec"]
        assert spec["group"] == "tensor-fusion.ai"
        assert spec["scope"] == scope
        assert spec["names"] == {
            "kind": info.kind,
            "listKind": f"{info.kind}List",
            "plural": plural,
            "singular": info.kind.lower(),
        }
        assert "shortNames" not in spec["names"]
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
        assert version["subresources"] == {"status": {}}
        assert crd_file_name(info) == f"tensor-fusion.ai_{plural}.yaml"


@pytest.mark.parametrize("info", KINDS, ids=lambda info: info.kind)
def test_schemas_are_structural(info: Any) -> None:
    schema = build_crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "$ref" not in yaml.safe_dump(schema)
    assert set(schema["properties"]) >= {"apiVersion", "kind", "metadata"}
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in _walk(schema):
        assert "nullable" not in node, path
        assert not ({"allOf", "oneOf", "not", "$ref", "definitions", "$defs"} & set(node)), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
            continue
        assert "anyOf" not in node, path
        if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, (
            path
        )
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), path
        if "enum" in node:
            assert all(isinstance(value, str) for value in node["enum"]), path
        if "default" in node:
            default = node["default"]
            if "enum" in node:
                assert default in node["enum"], path
            if "minimum" in node:
                assert node["minimum"] <= default <= node.get("maximum", default), path
        if node["type"] == "object" and "properties" in node:
            for name in node.get("required", []):
                assert name in node["properties"], path


def test_wire_names_keep_tensor_fusion_spelling() -> None:
    bad = re.compile(r"Tflops|Vram|Gpu|Qos|Uuid|Mbps|Ids\b|Ttl")
    for info in KINDS:
        schema = build_crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, _ in _walk(schema):
            assert not bad.search(path), f"{info.kind}: {path}"


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("GPUPool", "status.totalTFlops"),
        ("GPUPool", "status.virtualAvailableVRAM"),
        ("GPUPool", "status.totalGPUs"),
        ("GPUPool", "status.runningAppsCnt"),
        ("GPUPool", "spec.defaultUsingLocalGPU"),
        ("GPUPool", "spec.qosConfig.defaultQoS"),
        ("GPUPool", "spec.qosConfig.pricing.[].requests.perFP16TFlopsPerHour"),
        ("GPUPool", "spec.qosConfig.pricing.[].requests.perGBOfVRAMPerHour"),
        ("GPUPool", "spec.nodeManagerConfig.multiVendorNodeSelector"),
        ("GPUPool", "spec.nodeManagerConfig.nodeCompaction.defrag.evictedPodMarkerTTL"),
        ("GPUPool", "spec.nodeManagerConfig.nodeProvisioner.karpenterNodeClassRef"),
        ("GPUNode", "status.managedGPUDeviceIDs"),
        ("GPUNode", "status.totalGPUPods"),
        ("GPUNode", "status.nodeInfo.ramSize"),
        ("GPU", "status.topology.peers.[].peerGPUUUID"),
        ("GPU", "status.nvLink.totalBandwidthMBps"),
        ("GPU", "status.numaNode"),
        ("TensorFusionCluster", "status.readyGPUPools"),
        ("TensorFusionCluster", "status.virtualAvailableTFlops"),
        ("SchedulingConfigTemplate", "spec.placement.allowUsingLocalGPU"),
        ("SchedulingConfigTemplate", "spec.reBalancer"),
        ("WorkloadProfile", "spec.isLocalGPU"),
        ("WorkloadProfile", "spec.gpuIndices"),
        ("WorkloadProfile", "spec.autoScalingConfig.autoSetResources.targetVRAMPercentile"),
        ("TensorFusionWorkload", "status.gang.backoffUntil"),
        ("GPUResourceQuota", "spec.single.maxGPUCount"),
        ("GPUResourceQuota", "status.availablePercent.requests.tflops"),
        ("ProviderConfig", "spec.hardwareMetadata.[].fp16TFlops"),
    ],
)
def test_wire_names(kind: str, path: str) -> None:
    schema = _schema(kind)
    if kind == "GPUResourceQuota" and path.startswith("status.availablePercent."):
        assert "requests.tflops" in _at(schema, "status.availablePercent")["properties"]
        return
    assert _at(schema, path)


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [
        (
            "GPUPool",
            "spec.capacityConfig.oversubscription.tflopsOversellRatio",
            {"default": 500, "minimum": 100, "maximum": 100000, "format": "int32"},
        ),
        (
            "GPUPool",
            "spec.capacityConfig.oversubscription.vramExpandToHostMem",
            {"default": 50, "minimum": 0, "maximum": 100},
        ),
        (
            "GPUPool",
            "spec.capacityConfig.oversubscription.vramExpandToHostDisk",
            {"default": 70, "minimum": 0, "maximum": 100},
        ),
        ("GPUPool", "spec.nodeManagerConfig.provisioningMode", {"default": "AutoSelect"}),
        ("GPUPool", "spec.nodeManagerConfig.defaultIsolationMode", {"default": "soft"}),
        ("GPUPool", "spec.nodeManagerConfig.defaultVendor", {"default": "NVIDIA"}),
        (
            "GPUPool",
            "spec.nodeManagerConfig.nodePoolRollingUpdatePolicy.batchPercentage",
            {"default": 100, "minimum": 0, "maximum": 100},
        ),
        ("GPUPool", "spec.componentConfig.hypervisor.portNumber", {"default": 8000}),
        ("GPUPool", "spec.qosConfig.evictionProtectionPriceRatio", {"default": "1.2"}),
        ("GPUPool", "status.phase", {"default": "Pending"}),
        ("GPUPool", "status.provisioningPhase", {"default": "None"}),
        (
            "GPUPool",
            "spec.componentConfig.hypervisor.podTemplate",
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        ),
        ("TensorFusionCluster", "spec.gpuPools.[].isDefault", {"default": False}),
        ("TensorFusionCluster", "status.retryCount", {"default": 0}),
        ("GPUNode", "spec.manageMode", {"default": "AutoSelect"}),
        ("GPUNode", "status.phase", {"default": "Pending"}),
        ("GPU", "status.phase", {"default": "Pending"}),
        ("GPU", "status.vendor", {"default": "NVIDIA"}),
        ("GPU", "status.isolationMode", {"default": "soft"}),
        ("GPU", "status.usedBy", {"type": "string"}),
        ("SchedulingConfigTemplate", "spec.placement.mode", {"default": "NodeCompactGPULowLoad"}),
        ("SchedulingConfigTemplate", "spec.placement.allowUsingLocalGPU", {"default": True}),
        (
            "SchedulingConfigTemplate",
            "spec.hypervisor",
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        ),
        ("WorkloadProfile", "spec.gpuCount", {"minimum": 1, "maximum": 128}),
        ("WorkloadProfile", "spec.isolation", {"default": "soft"}),
        (
            "WorkloadProfile",
            "spec.workerPodTemplate",
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        ),
        (
            "WorkloadProfile",
            "spec.nodeAffinity",
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        ),
        ("TensorFusionWorkload", "status.phase", {"default": "Pending"}),
        ("GPUResourceQuota", "spec.total.maxWorkers", {"default": 32768}),
        (
            "GPUResourceQuota",
            "spec.total.alertThresholdPercent",
            {"default": 95, "minimum": 0, "maximum": 100},
        ),
        ("ProviderConfig", "spec", {"x-kubernetes-preserve-unknown-fields": True}),
        ("GPUNodeClaim", "spec", {"x-kubernetes-preserve-unknown-fields": True}),
        ("GPUNodeClass", "status", {"x-kubernetes-preserve-unknown-fields": True}),
        ("TensorFusionConnection", "spec", {"x-kubernetes-preserve-unknown-fields": True}),
    ],
)
def test_defaults_and_bounds_in_schema(kind: str, path: str, expected: dict[str, Any]) -> None:
    node = _at(_schema(kind), path)
    assert {key: node.get(key) for key in expected} == expected


def test_quantities_are_int_or_string_with_the_kubernetes_pattern() -> None:
    node = _at(_schema("GPUNode"), "status.totalVRAM")
    assert node == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }
    pattern = re.compile(QUANTITY_PATTERN)
    for good in ("16Gi", "100", "0.5", "500m", "1e3", "-1", ".5"):
        assert pattern.match(good), good
    for bad in ("16GB", "1.2.3", "Gi", ""):
        assert not pattern.match(bad), bad


def test_gpu_has_no_spec_and_declared_kinds_keep_everything() -> None:
    assert "spec" not in _schema("GPU")["properties"]
    spec = _at(_schema("TensorFusionConnection"), "spec")
    assert spec == {
        "type": "object",
        "description": "A spec kept verbatim.",
        "x-kubernetes-preserve-unknown-fields": True,
    }


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "GPUPool",
            ["Phase", "Total TFlops", "Total VRAM", "Available TFlops", "Available VRAM", "Age"],
        ),
        (
            "GPU",
            ["Phase", "Model", "Total TFlops", "Total VRAM", "Available TFlops", "Node", "Age"],
        ),
        ("GPUNode", ["Phase", "GPUs", "Total TFlops", "Available VRAM", "Virtual TFlops", "Age"]),
        ("TensorFusionCluster", ["Phase", "Pools", "Total TFlops", "Available VRAM", "Age"]),
        ("TensorFusionWorkload", ["Phase", "Workers", "Ready", "Pool", "QoS", "Age"]),
        ("SchedulingConfigTemplate", ["Placement Mode", "Age"]),
        ("ProviderConfig", ["Vendor", "Age"]),
    ],
)
def test_printer_columns(kind: str, columns: list[str]) -> None:
    crd = build_crd(kind_info(kind))
    printed = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [column["name"] for column in printed]
    assert [name for name in names if name in columns] == columns
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for column in printed:
        assert column["type"] in {"string", "integer", "number", "boolean", "date"}
        path = column["jsonPath"]
        assert path.startswith(".")
        if path.startswith(".metadata."):
            continue
        parts = re.split(r"(?<!\\)\.", path[1:])
        node = schema
        for part in parts:
            if node.get("additionalProperties"):
                break
            node = node["properties"][part]


def test_rendered_yaml_parses_back_to_the_manifest() -> None:
    rendered = render_crds()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for info in KINDS:
        text = rendered[crd_file_name(info)]
        assert text.startswith("# Generated by `tensor-fusion gen-crds`")
        assert yaml.load(text, Loader=loader) == build_crd(info)


def _cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Group mode, as in the real CLI."""

    app.command("gen-crds")(gen_crds)
    return app


def test_gen_crds_writes_checks_and_prunes(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "crds"
    stale = runner.invoke(_cli(), ["gen-crds", "--check", "--output", str(out)])
    assert stale.exit_code == 1
    written = runner.invoke(_cli(), ["gen-crds", "--output", str(out)])
    assert written.exit_code == 0, written.output
    assert sorted(path.name for path in out.iterdir()) == sorted(render_crds())
    assert runner.invoke(_cli(), ["gen-crds", "--check", "--output", str(out)]).exit_code == 0
    (out / "tensor-fusion.ai_gpus.yaml").write_text("edited\n", encoding="utf-8")
    (out / "tensor-fusion.ai_oldkinds.yaml").write_text("old\n", encoding="utf-8")
    (out / "README.md").write_text("kept\n", encoding="utf-8")
    assert differing_files(out) == ["tensor-fusion.ai_gpus.yaml", "tensor-fusion.ai_oldkinds.yaml"]
    assert runner.invoke(_cli(), ["gen-crds", "--check", "-o", str(out)]).exit_code == 1
    assert write_crds(out) == ["tensor-fusion.ai_gpus.yaml", "tensor-fusion.ai_oldkinds.yaml"]
    assert differing_files(out) == []
    assert (out / "README.md").exists()
