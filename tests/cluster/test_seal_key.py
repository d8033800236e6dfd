"""The allocation seal's key in its Secret, on the real API server: created once, read by
everyone after, and a Secret without a usable key retried (with backoff) until it is fixed."""

from __future__ import annotations

import base64

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from tensorfusion.controller.seal_key import load_seal_key
from tensorfusion.domain.allocator.allocation_seal import seal_key_data

pytestmark = pytest.mark.cluster


async def test_the_key_is_made_once_and_read_after(kube: AsyncClient, namespace: str) -> None:
    first = await load_seal_key(kube, namespace=namespace, name="tf-allocation-seal")
    again = await load_seal_key(kube, namespace=namespace, name="tf-allocation-seal")
    assert first == again and len(first) == 32


async def test_a_short_key_is_retried_with_backoff_until_fixed(
    kube: AsyncClient, namespace: str
) -> None:
    short = {"key": base64.b64encode(b"short").decode()}
    await kube.create(Secret(metadata=ObjectMeta(name="tf-allocation-seal", namespace=namespace),
                             data=short))  # fmt: skip
    waits: list[float] = []
    good = b"g" * 32

    async def fix_after_two(delay: float) -> None:
        waits.append(delay)
        if len(waits) == 2:
            await kube.patch(Secret, "tf-allocation-seal", {"data": seal_key_data(good)},
                             namespace=namespace)  # fmt: skip

    key = await load_seal_key(kube, namespace=namespace, name="tf-allocation-seal",
                              sleep=fix_after_two)  # fmt: skip
    assert key == good
    assert waits == [1.0, 2.0]
