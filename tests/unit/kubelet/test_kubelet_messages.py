"""The protobuf wire codec of the kubelet messages: golden bytes, round trips, bad input."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfusion.domain.devices.kubelet_messages import (
    AllocateRequest,
    AllocateResponse,
    CDIDevice,
    ContainerAllocateRequest,
    ContainerAllocateResponse,
    ContainerDevices,
    ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse,
    ContainerResources,
    Device,
    DevicePluginOptions,
    DeviceSpec,
    Empty,
    KubeletPodResources,
    ListAndWatchResponse,
    ListPodResourcesResponse,
    Message,
    Mount,
    NUMANode,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
    PreStartContainerRequest,
    RegisterRequest,
    TopologyInfo,
    WireError,
    decode,
    encode,
)

from ...hypothesis_budget import examples

GOLDEN: list[tuple[Message, str]] = [
    (
        RegisterRequest("v1beta1", "a.sock", "r", DevicePluginOptions(True, False)),
        "0a07" + b"v1beta1".hex() + "1206" + b"a.sock".hex() + "1a0172" + "22020801",
    ),
    (
        Device("x", "Healthy", TopologyInfo((NUMANode(1),))),
        "0a0178" + "1207" + b"Healthy".hex() + "1a04" + "0a020801",
    ),
    (NUMANode(-1), "08" + "ff" * 9 + "01"),
    (ContainerAllocateResponse(envs={"K": "V"}), "0a06" + "0a014b" + "120156"),
    (ContainerAllocateResponse(annotations={"K": ""}), "2205" + "0a014b" + "1200"),
    (Mount("/c", "/h", True), "0a022f63" + "12022f68" + "1801"),
    (ContainerPreferredAllocationRequest(allocation_size=300), "18ac02"),
    (AllocateRequest((ContainerAllocateRequest(("a", "")),)), "0a05" + "0a0161" + "0a00"),
    (
        ListPodResourcesResponse(
            (
                KubeletPodResources(
                    "p", "n", (ContainerResources("c", (ContainerDevices("r", ("d",)),)),)
                ),
            )
        ),
        "0a13" + "0a0170" + "12016e" + "1a0b" + "0a0163" + "1206" + "0a0172" + "120164",
    ),
    (Empty(), ""),
    (DevicePluginOptions(), ""),
]


@pytest.mark.parametrize(("message", "wire"), GOLDEN)
def test_encoding_matches_the_protobuf_wire_format(message: Message, wire: str) -> None:
    assert encode(message).hex() == wire
    assert decode(type(message), bytes.fromhex(wire)) == message


def test_fields_of_newer_kubelets_are_skipped() -> None:
    # ContainerResources of a newer kubelet: cpu_ids = 3 (packed int64), memory = 4, plus a
    # fixed64 and a fixed32 field with numbers this codec does not know.
    known = encode(ContainerResources("c", (ContainerDevices("r", ("d",)),)))
    unknown = "1a03010203" + "2200" + "f906" + "00" * 8 + "fd06" + "00" * 4 + "8007ac02"
    assert decode(ContainerResources, bytes.fromhex(unknown) + known + bytes.fromhex(unknown)) == (
        ContainerResources("c", (ContainerDevices("r", ("d",)),))
    )


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        ("0a05616263", "bytes past the end"),  # string of 5 bytes, 3 present
        ("08", "truncated varint"),
        ("08" + "ff" * 10 + "01", "longer than 10 bytes"),
        ("08" + "ff" * 9 + "02", "overflows 64 bits"),
        ("0b", "unsupported wire type 3"),  # start group
        ("0001", "field number 0"),
        ("0801", "RegisterRequest.version: wire type 0, expected 2"),
        ("0a02c328", "RegisterRequest.version: not UTF-8"),
        ("2202" + "0a00", "DevicePluginOptions.pre_start_required: wire type 2, expected 0"),
    ],
)
def test_malformed_bytes_are_a_wire_error(wire: str, error: str) -> None:
    with pytest.raises(WireError, match=error):
        decode(RegisterRequest, bytes.fromhex(wire))


def test_a_map_entry_with_a_wrongly_typed_key_is_a_wire_error() -> None:
    with pytest.raises(WireError, match=r"ContainerAllocateResponse\.envs: map entry field 1"):
        decode(ContainerAllocateResponse, bytes.fromhex("0a02" + "0801"))


_text = st.text(max_size=12)
_ids = st.lists(_text, max_size=4).map(tuple)
_map = st.dictionaries(_text, _text, max_size=3)
_topology = st.builds(
    TopologyInfo,
    st.lists(st.builds(NUMANode, st.integers(-(2**63), 2**63 - 1)), max_size=3).map(tuple),
)


def _many(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(strategy, max_size=3).map(tuple)


_device = st.builds(Device, _text, _text, st.none() | _topology)
_container_response = st.builds(
    ContainerAllocateResponse,
    _map,
    _many(st.builds(Mount, _text, _text, st.booleans())),
    _many(st.builds(DeviceSpec, _text, _text, _text)),
    _map,
    _many(st.builds(CDIDevice, _text)),
)
_pod_resources = st.builds(
    KubeletPodResources,
    _text,
    _text,
    _many(
        st.builds(
            ContainerResources,
            _text,
            _many(st.builds(ContainerDevices, _text, _ids, st.none() | _topology)),
        )
    ),
)
MESSAGES = st.one_of(
    st.builds(
        RegisterRequest,
        _text,
        _text,
        _text,
        st.none() | st.builds(DevicePluginOptions, st.booleans(), st.booleans()),
    ),
    st.builds(ListAndWatchResponse, _many(_device)),
    st.builds(PreStartContainerRequest, _ids),
    st.builds(
        PreferredAllocationRequest,
        _many(
            st.builds(
                ContainerPreferredAllocationRequest,
                _ids,
                _ids,
                st.integers(-(2**31), 2**31 - 1),
            )
        ),
    ),
    st.builds(
        PreferredAllocationResponse, _many(st.builds(ContainerPreferredAllocationResponse, _ids))
    ),
    st.builds(AllocateRequest, _many(st.builds(ContainerAllocateRequest, _ids))),
    st.builds(AllocateResponse, _many(_container_response)),
    st.builds(ListPodResourcesResponse, _many(_pod_resources)),
)


@settings(max_examples=examples(100), deadline=None)
@given(MESSAGES)
def test_every_message_survives_a_round_trip(message: Message) -> None:
    assert decode(type(message), encode(message)) == message


@settings(max_examples=examples(100), deadline=None)
@given(MESSAGES, st.binary(max_size=40))
def test_arbitrary_bytes_decode_or_raise_a_wire_error(message: Message, noise: bytes) -> None:
    wire = encode(message)
    for data in (noise, wire[: len(wire) // 2] + noise):
        with contextlib.suppress(WireError):
            decode(type(message), data)
