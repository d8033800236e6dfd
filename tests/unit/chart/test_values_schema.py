"""`charts/tensor-fusion/values.schema.json` (deployment.md §1, §3, §4).

1. Every `default` in the schema equals the value at the same path of `values.yaml`, and every
   key of `values.yaml` has a schema entry (lists compare whole).
2. `values.yaml` with `values-production.yaml`, and with each snippet of the production guide
   on top, validates; typical mistakes do not.
3. Helm (the testenv's binary) refuses a wrong type, an image tagged `latest` and an unknown
   `failurePolicy`, naming the key.

jsonschema is not a dependency of the project, so the schema is checked by the small draft-07
validator below, which knows exactly the keywords the schema uses (a test fails on any other).
Where jsonschema is installed, it checks the same cases too.
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

ROOT: Final = Path(__file__).resolve().parents[3]
CHART: Final = ROOT / "charts" / "tensor-fusion"
SCHEMA_FILE: Final = CHART / "values.schema.json"
VALUES_FILE: Final = CHART / "values.yaml"
PRODUCTION_FILE: Final = CHART / "values-production.yaml"
SNIPPETS: Final = ROOT / "examples" / "production"
HELM: Final = Path.home() / ".cache" / "tensor-fusion" / "testenv" / "v1.37.2" / "helm"
SCHEMA_ERROR: Final = "don't meet the specifications of the schema"

# Keywords of draft-07 the validator below implements; the schema may use no others.
KEYWORDS: Final = frozenset(
    {
        "$schema", "$ref", "title", "description", "default", "definitions", "type",
        "properties", "additionalProperties", "required", "items", "enum", "const", "minimum",
        "maximum", "minLength", "maxLength", "minItems", "pattern", "not", "allOf",
    }
)  # fmt: skip
# Keywords whose value maps names to schemas (the names are not keywords).
NAMED_SCHEMAS: Final = frozenset({"properties", "definitions"})


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    loaded = load_yaml(VALUES_FILE)
    assert isinstance(loaded, dict)
    return loaded


def merge(base: Any, overlay: Any) -> Any:
    """Helm's merge of a values file over another: maps merge, null deletes, the rest replaces."""
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return copy.deepcopy(overlay)
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def same(left: Any, right: Any) -> bool:
    """Deep equality that also tells true from 1 and 1 from 1.0."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same, left, right))
    return bool(left == right)


# -- a draft-07 validator for the keywords in KEYWORDS


def _is_type(instance: Any, name: str) -> bool:
    if isinstance(instance, bool):
        return name == "boolean"
    if name == "integer":
        return isinstance(instance, int) or (
            isinstance(instance, float) and math.isfinite(instance) and instance.is_integer()
        )
    kinds: dict[str, type | tuple[type, ...]] = {
        "object": dict, "array": list, "string": str, "number": (int, float),
        "null": type(None), "boolean": bool,
    }  # fmt: skip
    return isinstance(instance, kinds[name])


class Validator:
    """Errors of an instance against the schema, each `<JSON pointer>: <what is wrong>`."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, reference: str) -> Any:
        assert reference.startswith("#/"), reference
        node: Any = self.root
        for part in reference[2:].split("/"):
            node = node[part]
        return node

    def errors(self, instance: Any, schema: Any, path: str = "") -> list[str]:
        where = path or "/"
        if schema is True:
            return []
        if schema is False:
            return [f"{where}: not allowed"]
        found: list[str] = []
        if "$ref" in schema:  # draft-07: the siblings of $ref are ignored
            return self.errors(instance, self.resolve(schema["$ref"]), path)
        for sub in schema.get("allOf", ()):
            found += self.errors(instance, sub, path)
        if "not" in schema and not self.errors(instance, schema["not"], path):
            found.append(f"{where}: matches the schema under 'not'")
        types = schema.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else list(types)
            if not any(_is_type(instance, name) for name in names):
                return [*found, f"{where}: {type(instance).__name__} is not {' or '.join(names)}"]
        if "enum" in schema and not any(same(instance, v) for v in schema["enum"]):
            found.append(f"{where}: {instance!r} is not one of {schema['enum']}")
        if "const" in schema and not same(instance, schema["const"]):
            found.append(f"{where}: {instance!r} is not {schema['const']!r}")
        if isinstance(instance, str):
            found += self._string(instance, schema, where)
        elif isinstance(instance, int | float) and not isinstance(instance, bool):
            found += self._number(instance, schema, where)
        elif isinstance(instance, list):
            found += self._array(instance, schema, path)
        elif isinstance(instance, dict):
            found += self._object(instance, schema, path)
        return found

    @staticmethod
    def _string(instance: str, schema: Mapping[str, Any], where: str) -> list[str]:
        found: list[str] = []
        if len(instance) < schema.get("minLength", 0):
            found.append(f"{where}: {instance!r} is shorter than {schema['minLength']}")
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            found.append(f"{where}: {instance!r} is longer than {schema['maxLength']}")
        if "pattern" in schema and re.search(schema["pattern"], instance) is None:
            found.append(f"{where}: {instance!r} does not match {schema['pattern']}")
        return found

    @staticmethod
    def _number(instance: float, schema: Mapping[str, Any], where: str) -> list[str]:
        found: list[str] = []
        if "minimum" in schema and instance < schema["minimum"]:
            found.append(f"{where}: {instance} is less than {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            found.append(f"{where}: {instance} is more than {schema['maximum']}")
        return found

    def _array(self, instance: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
        found: list[str] = []
        if len(instance) < schema.get("minItems", 0):
            found.append(f"{path or '/'}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for index, item in enumerate(instance):
                found += self.errors(item, schema["items"], f"{path}/{index}")
        return found

    def _object(self, instance: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
        found = [
            f"{path or '/'}: {name!r} is required"
            for name in schema.get("required", ())
            if name not in instance
        ]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in instance.items():
            sub = properties.get(key, extra)
            if sub is False:
                found.append(f"{path or '/'}: unknown key {key!r}")
            else:
                found += self.errors(value, sub, f"{path}/{key}")
        return found


# -- walking the schema


def keywords(node: Any) -> Iterator[str]:
    """Every keyword used anywhere in a schema."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        yield key
        if key in NAMED_SCHEMAS:
            for sub in value.values():
                yield from keywords(sub)
        elif key == "allOf":
            for sub in value:
                yield from keywords(sub)
        elif key in ("items", "not", "additionalProperties"):
            yield from keywords(value)


def property_nodes(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, schema) of every entry reached from the root through `properties`."""
    for key, sub in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        yield here, sub
        if isinstance(sub, dict):
            yield from property_nodes(sub, here)


def count_defaults(node: Any) -> int:
    if isinstance(node, dict):
        own = 1 if "default" in node else 0
        return own + sum(count_defaults(v) for k, v in node.items() if k != "default")
    if isinstance(node, list):
        return sum(count_defaults(v) for v in node)
    return 0


def child(validator: Validator, node: Any, key: str) -> Any:
    """The schema of `key` inside `node`, through `$ref` and `allOf`; None if it has none."""
    if not isinstance(node, dict):
        return None
    if "$ref" in node:
        return child(validator, validator.resolve(node["$ref"]), key)
    if key in node.get("properties", {}):
        return node["properties"][key]
    for sub in node.get("allOf", ()):
        found = child(validator, sub, key)
        if found is not None:
            return found
    return None


def rebuilt_defaults(node: Mapping[str, Any]) -> Any:
    """values.yaml as the schema's defaults describe it."""
    if "default" in node:
        return node["default"]
    return {
        key: rebuilt_defaults(sub)
        for key, sub in node.get("properties", {}).items()
        if isinstance(sub, dict) and (count_defaults(sub) or "default" in sub)
    }


def lookup(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


# -- 1. defaults


def test_the_schema_is_draft_07_with_only_the_keywords_checked_here(
    schema: dict[str, Any],
) -> None:
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert set(keywords(schema)) <= KEYWORDS, set(keywords(schema)) - KEYWORDS
    for where, pattern in _patterns(schema):
        assert re.compile(pattern), where


def _patterns(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield path, value
            elif key != "default":
                yield from _patterns(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _patterns(value, f"{path}/{index}")


def test_every_default_equals_values_yaml(schema: dict[str, Any], values: dict[str, Any]) -> None:
    wrong: list[str] = []
    checked = 0
    for path, node in property_nodes(schema):
        if not isinstance(node, dict) or "default" not in node:
            continue
        checked += 1
        present, value = lookup(values, path)
        if not present:
            wrong.append(f"{path}: default {node['default']!r}, but values.yaml has no such key")
        elif not same(node["default"], value):
            wrong.append(f"{path}: default {node['default']!r} != values.yaml {value!r}")
    assert not wrong, "\n".join(wrong)
    # Every default sits on an entry reached through `properties` (none hides elsewhere).
    assert checked == count_defaults(schema), "a default outside the properties tree"
    assert same(rebuilt_defaults(schema), values)


def test_every_key_of_values_yaml_has_a_schema_entry(
    schema: dict[str, Any], values: dict[str, Any]
) -> None:
    validator = Validator(schema)
    missing: list[str] = []
    undefaulted: list[str] = []

    def walk(value: Mapping[str, Any], node: Any, path: str, covered: bool) -> None:
        for key, sub_value in value.items():
            here = f"{path}.{key}" if path else key
            sub = child(validator, node, key)
            if sub is None:
                missing.append(here)
                continue
            has_default = covered or "default" in sub
            if isinstance(sub_value, dict) and sub_value:
                walk(sub_value, sub, here, has_default)
            elif not has_default:
                undefaulted.append(here)

    walk(values, schema, "", covered=False)
    assert not missing, f"keys of values.yaml without a schema entry: {missing}"
    assert not undefaulted, f"values.yaml leaves without a schema default: {undefaulted}"


# -- 2. validation


def production_values(values: dict[str, Any]) -> Any:
    return merge(values, load_yaml(PRODUCTION_FILE))


def snippet_files() -> list[Path]:
    return sorted(SNIPPETS.glob("*.yaml")) if SNIPPETS.is_dir() else []


# The guide's settings that the snippet files leave out, and both image forms (§4).
GUIDE_EXTRAS: Final[dict[str, Any]] = {
    "greptime": {"isCloud": True, "host": "x.us-west-2.aws.greptime.cloud", "port": 5001,
                 "db": "db", "user": "u", "password": "p"},
    "agent": {"agentId": "org:env", "enrollToken": "token"},
    "controller": {
        "image": {"repository": "tensorfusion/tensor-fusion-operator", "tag": "1.48.6"},
        "admissionWebhooks": {"failurePolicy": "Ignore"},
        "isolationModePolicy": "static",
    },
    "cluster": {"hypervisorImage": "tensorfusion/tensor-fusion-hypervisor:1.48.6"},
    "providerConfigs": {"nvidia": {"images": {
        "middleware": "registry.example.com:5000/tensorfusion/vgpu-provider-nvidia:1.3.9",
        "remoteClient": "tensorfusion/tensor-fusion-client@sha256:" + "a" * 64,
    }, "hardwareMetadata": [{"model": "H100", "fullModelName": "NVIDIA H100 80GB HBM3",
                              "fp16TFlops": "989", "costPerHour": "2.5"}]}},
    "dynamicConfig": {"autoMigration": {"enable": True, "scope": {
        "includes": {"namespaceNames": ["ml"]},
        "excludes": [{"podSelector": {"matchLabels": {"app": "legacy"}}}],
    }}},
}  # fmt: skip


def test_values_and_the_production_overlay_validate(
    schema: dict[str, Any], values: dict[str, Any]
) -> None:
    validator = Validator(schema)
    assert validator.errors(values, schema) == []
    assert validator.errors(production_values(values), schema) == []


@pytest.mark.parametrize("snippet", snippet_files(), ids=lambda path: path.name)
def test_each_guide_snippet_over_the_production_overlay_validates(
    schema: dict[str, Any], values: dict[str, Any], snippet: Path
) -> None:
    document = load_yaml(snippet)
    if isinstance(document, list):  # a rule to append to the copied default alertRules
        document = {"dynamicConfig": {"alertRules": [*values["dynamicConfig"]["alertRules"],
                                                     *document]}}  # fmt: skip
    assert Validator(schema).errors(merge(production_values(values), document), schema) == []


def test_the_guides_other_settings_and_both_image_forms_validate(
    schema: dict[str, Any], values: dict[str, Any]
) -> None:
    merged = merge(production_values(values), GUIDE_EXTRAS)
    assert Validator(schema).errors(merged, schema) == []


# (overrides, the JSON pointer the error names)
REJECTED: Final[list[tuple[dict[str, Any], str]]] = [
    ({"controller": {"replicaCount": "abc"}}, "/controller/replicaCount"),
    ({"controller": {"replicaCount": 0}}, "/controller/replicaCount"),
    ({"controller": {"replicaCount": 1.5}}, "/controller/replicaCount"),
    ({"alert": {"replicaCount": -1}}, "/alert/replicaCount"),
    ({"controller": {"image": {"tag": "latest"}}}, "/controller/image/tag"),
    ({"controller": {"image": {"tag": 2}}}, "/controller/image/tag"),
    ({"controller": {"image": {"repository": ""}}}, "/controller/image/repository"),
    ({"greptime": {"image": "docker.io/greptime/greptimedb:latest"}}, "/greptime/image"),
    ({"greptime": {"image": "docker.io/greptime/greptimedb"}}, "/greptime/image"),
    ({"alert": {"image": {"repository": "quay.io/prometheus/alertmanager", "digest": "x"}}},
     "/alert/image"),
    ({"controller": {"admissionWebhooks": {"failurePolicy": "Sometimes"}}},
     "/controller/admissionWebhooks/failurePolicy"),
    ({"controller": {"isolationModePolicy": "partial"}}, "/controller/isolationModePolicy"),
    ({"controller": {"replicaCuont": 2}}, "/controller"),
    ({"controller": {"admissionWebhooks": {"failurePolicyy": "Fail"}}},
     "/controller/admissionWebhooks"),
    ({"greptime": {"prot": 4002}}, "/greptime"),
    ({"greptime": {"port": "4002"}}, "/greptime/port"),
    ({"alert": {"enabled": "true"}}, "/alert/enabled"),
    ({"cluster": {"pool": {"nodeSelector": "x"}}}, "/cluster/pool"),
    ({"cluster": {"pool": {"defaultIsolationMode": "Soft"}}}, "/cluster/pool/defaultIsolationMode"),
    ({"cluster": {"pool": {"capacityConfig": {"oversubscription": {"tflopsOversellRatio": 99}}}}},
     "/cluster/pool/capacityConfig/oversubscription/tflopsOversellRatio"),
    ({"cluster": {"pool": {"capacityConfig": {"oversubscription": {"vramExpandToHostMem": 101}}}}},
     "/cluster/pool/capacityConfig/oversubscription/vramExpandToHostMem"),
    ({"cluster": {"pool": {"capacityConfig": {"oversubscription": {"vramExpandToHostDisk": -1}}}}},
     "/cluster/pool/capacityConfig/oversubscription/vramExpandToHostDisk"),
    ({"cluster": {"pool": {"nodePoolRollingUpdatePolicy": {"batchPercentage": 120}}}},
     "/cluster/pool/nodePoolRollingUpdatePolicy/batchPercentage"),
    ({"cluster": {"pool": {"nodePoolRollingUpdatePolicy": {"batchInterval": "5 minutes"}}}},
     "/cluster/pool/nodePoolRollingUpdatePolicy/batchInterval"),
    ({"dynamicConfig": {"alertRules": [{"name": "x", "query": "SELECT 1", "severity": "P1",
                                        "evaluationInterval": "1.5m"}]}},
     "/dynamicConfig/alertRules/0/evaluationInterval"),
    ({"dynamicConfig": {"alertRules": [{"name": "x", "query": "SELECT 1", "severity": "P1",
                                        "evaluationInterval": "1m", "threshold": "5"}]}},
     "/dynamicConfig/alertRules/0/threshold"),
    ({"dynamicConfig": {"metricsTTL": "30 days"}}, "/dynamicConfig/metricsTTL"),
    ({"dynamicConfig": {"autoMigration": {"enable": "true"}}},
     "/dynamicConfig/autoMigration/enable"),
    ({"schedulerConfig": {"extenders": [{"urlPrefix": "http://x"}]}}, "/schedulerConfig/extenders"),
    ({"contoller": {}}, "/"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "pointer"), REJECTED, ids=lambda p: str(p)[:70])
def test_mistakes_are_rejected_naming_the_key(
    schema: dict[str, Any], values: dict[str, Any], overrides: dict[str, Any], pointer: str
) -> None:
    errors = Validator(schema).errors(merge(values, overrides), schema)
    assert errors, f"{overrides} was accepted"
    assert any(error.startswith(f"{pointer}:") for error in errors), errors


def test_jsonschema_agrees_where_installed(schema: dict[str, Any], values: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    assert list(validator.iter_errors(production_values(values))) == []
    assert list(validator.iter_errors(merge(production_values(values), GUIDE_EXTRAS))) == []
    for overrides, _ in REJECTED:
        assert list(validator.iter_errors(merge(values, overrides))), overrides


# -- 3. helm


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.is_file():
        pytest.skip(f"the testenv's helm is not installed at {HELM}")
    return subprocess.run(
        [str(HELM), "template", "t", str(CHART), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--set", "controller.replicaCount=abc"], ["controller", "replicaCount"]),
        (["--set-string", "controller.replicaCount=2"], ["controller", "replicaCount"]),
        (["--set", "controller.image.tag=latest"], ["controller", "image", "tag"]),
        (["--set", "alert.image=quay.io/prometheus/alertmanager:latest"], ["alert", "image"]),
        (["--set", "controller.admissionWebhooks.failurePolicy=Sometimes"],
         ["admissionWebhooks", "failurePolicy"]),
    ],
    ids=" ".join,
)  # fmt: skip
def test_helm_rejects_a_bad_value_naming_the_key(args: list[str], names: list[str]) -> None:
    result = helm_template(*args)
    assert result.returncode != 0, result.stdout[-2000:]
    assert SCHEMA_ERROR in result.stderr, result.stderr
    for name in names:
        assert name in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-f", str(PRODUCTION_FILE)],
        ["--set", "controller.image=tensorfusion/tensor-fusion-operator:1.48.6"],
    ],
    ids=["defaults", "production", "image-string"],
)
def test_helm_accepts_the_defaults_and_the_overlay(args: list[str]) -> None:
    # Only the schema is asserted: the templates may fail for reasons of their own.
    assert SCHEMA_ERROR not in helm_template(*args).stderr
