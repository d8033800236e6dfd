"""Index resource encoding (api.md §6) and the key set (api.md §3-§7)."""

from __future__ import annotations

import pytest

from tensorfusion.domain.annotations import (
    KEYS,
    IndexResourceError,
    build_keys,
    decode_index,
    encode_index,
    pod_index_from_containers,
)

PREFIX = "tensor-fusion.ai/index_"


@pytest.mark.parametrize("p", range(1, 129))
def test_round_trip(p: int) -> None:
    name, value = encode_index(p)
    assert name == f"{PREFIX}{(p - 1) // 8:x}"
    assert value == (p - 1) % 8 + 1
    assert decode_index(name, value) == p
    assert decode_index(name, str(value)) == p


@pytest.mark.parametrize(
    ("p", "name", "value"),
    [
        (1, PREFIX + "0", 1),
        (8, PREFIX + "0", 8),
        (9, PREFIX + "1", 1),
        (16, PREFIX + "1", 8),
        (127, PREFIX + "f", 7),
        (128, PREFIX + "f", 8),
    ],
)
def test_known_encodings(p: int, name: str, value: int) -> None:
    assert encode_index(p) == (name, value)


def test_128_is_not_index_10() -> None:
    assert encode_index(128)[0] == PREFIX + "f"
    assert PREFIX + "10" not in KEYS.index_resource_names
    assert len(KEYS.index_resource_names) == 16


@pytest.mark.parametrize("p", [0, 129, -1, True])
def test_encode_rejects_out_of_range(p: int) -> None:
    with pytest.raises(IndexResourceError):
        encode_index(p)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (PREFIX + "0", 0),
        (PREFIX + "0", 9),
        (PREFIX + "0", "x"),
        (PREFIX + "g", 1),
        (PREFIX + "10", 1),
        ("nvidia.com/gpu", 1),
    ],
)
def test_decode_rejects_malformed(name: str, value: object) -> None:
    with pytest.raises(IndexResourceError):
        decode_index(name, value)


def test_pod_index_from_containers() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a"},
                {"name": "b", "resources": {"limits": {"cpu": "1", PREFIX + "3": "5"}}},
            ]
        }
    }
    assert pod_index_from_containers(pod) == 29
    assert pod_index_from_containers({"spec": {"containers": [{"name": "a"}]}}) is None


def test_custom_domain_keys() -> None:
    keys = build_keys("acme", "io")
    assert keys.domain == "acme.io"
    assert keys.gpu_count == "acme.io/gpu-count"
    assert keys.scheduler_name == "acme-scheduler"
    assert keys.finalizer == "acme.io/finalizer"
    assert keys.toleration() == {
        "key": "acme.io/used-by",
        "operator": "Equal",
        "value": "acme",
        "effect": "PreferNoSchedule",
    }
    assert keys.priority_class_for("high") == "acme-high"
    assert keys.priority_class_for("medium") is None
    assert encode_index(128, keys) == ("acme.io/index_f", 8)
    assert keys.tf_counter("abc") == "acme.io/tf-counter-abc"
    assert keys.pool_member_label("p") == "acme.io/pool-p"
    assert keys.update_in_progress("hypervisor") == "acme.io/hypervisor-update-in-progress"


def test_default_keys() -> None:
    assert KEYS.enabled == "tensor-fusion.ai/enabled"
    assert KEYS.scheduler_name == "tensor-fusion-scheduler"
    assert KEYS.priority_class_critical == "tensor-fusion-critical"
    assert KEYS.webhook_name == "mpod.tensor-fusion.ai"
