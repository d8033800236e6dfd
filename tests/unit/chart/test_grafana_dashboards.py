"""`templates/grafana-dashboards.yaml` as the testenv's helm renders it: off by default; when on,
one ConfigMap per committed dashboard JSON, holding that file, with the sidecar's label and
folder annotation (both configurable) in the chosen namespace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

ROOT: Final = Path(__file__).resolve().parents[3]
CHART: Final = ROOT / "charts" / "tensor-fusion"
DASHBOARDS: Final = CHART / "dashboards"
HELM: Final = Path.home() / ".cache" / "tensor-fusion" / "testenv" / "v1.37.2" / "helm"
COMPONENT: Final = "grafana-dashboards"


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.is_file():
        pytest.skip(f"the testenv's helm is not installed at {HELM}")
    return subprocess.run(
        [str(HELM), "template", "tf", str(CHART), "--namespace", "tf-sys", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def dashboard_maps(*args: str) -> list[dict[str, Any]]:
    result = helm_template(*args)
    assert result.returncode == 0, result.stderr
    return [
        o
        for o in yaml.safe_load_all(result.stdout)
        if isinstance(o, dict)
        and o.get("kind") == "ConfigMap"
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == COMPONENT
    ]


def test_no_dashboards_by_default() -> None:
    assert dashboard_maps() == []


def test_one_configmap_per_committed_dashboard_with_the_sidecar_defaults() -> None:
    files = sorted(DASHBOARDS.glob("*.json"))
    assert [f.stem for f in files] == ["alerts", "gpus", "nodes", "overview", "workloads"]
    maps = dashboard_maps("--set", "grafana.dashboards.enabled=true")
    assert [m["metadata"]["name"] for m in maps] == [f"tf-dashboard-{f.stem}" for f in files]
    for config_map, path in zip(maps, files, strict=True):
        metadata = config_map["metadata"]
        assert metadata["namespace"] == "tf-sys"
        assert metadata["labels"]["grafana_dashboard"] == "1"
        assert metadata["annotations"] == {"grafana_folder": "TensorFusion"}
        assert list(config_map["data"]) == [path.name]
        text = config_map["data"][path.name]
        assert text + "\n" == path.read_text(encoding="utf-8")
        assert json.loads(text)["uid"] == f"tf-{path.stem}"


def test_namespace_label_folder_and_extras_are_configurable() -> None:
    maps = dashboard_maps(
        "--set",
        "grafana.dashboards.enabled=true",
        "--set",
        "grafana.dashboards.namespace=monitoring",
        "--set",
        "grafana.dashboards.label=example.com/dashboard",
        "--set-string",
        "grafana.dashboards.labelValue=yes",
        "--set",
        "grafana.dashboards.folderAnnotation=k8s-sidecar-target-directory",
        "--set",
        "grafana.dashboards.folder=GPU pools",
        "--set",
        "grafana.dashboards.labels.team=platform",
        "--set",
        "grafana.dashboards.annotations.owner=sre",
    )
    assert len(maps) == 5
    for config_map in maps:
        metadata = config_map["metadata"]
        assert metadata["namespace"] == "monitoring"
        assert metadata["labels"]["example.com/dashboard"] == "yes"
        assert metadata["labels"]["team"] == "platform"
        assert "grafana_dashboard" not in metadata["labels"]
        assert metadata["annotations"] == {
            "owner": "sre",
            "k8s-sidecar-target-directory": "GPU pools",
        }


def test_an_empty_folder_leaves_the_annotation_out() -> None:
    maps = dashboard_maps(
        "--set", "grafana.dashboards.enabled=true", "--set", "grafana.dashboards.folder="
    )
    assert maps and all("annotations" not in m["metadata"] for m in maps)


@pytest.mark.parametrize(
    "setting",
    [
        "grafana.dashboards.label=bad label",
        "grafana.dashboards.namespace=Not_A_Namespace",
        "grafana.dashboards.enabled=maybe",
    ],
)
def test_the_schema_refuses_a_bad_value_naming_the_key(setting: str) -> None:
    result = helm_template("--set", setting)
    assert result.returncode != 0
    assert "grafana" in result.stderr and "dashboards" in result.stderr, result.stderr
