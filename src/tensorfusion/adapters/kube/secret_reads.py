"""A Secret read, or created when absent (a writer that loses the creation race reads the
winner's); and a plain read of a Secret's values and annotations."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

__all__ = ["SecretContent", "read_or_create_secret", "read_secret"]


async def read_or_create_secret(
    client: AsyncClient,
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    data: Callable[[], dict[str, str]],
) -> tuple[dict[str, str] | None, bool]:
    """The Secret's `data`, and whether this call created it (an Opaque Secret with `labels`
    and `data()`, made only when the Secret is absent). API errors other than the absent
    Secret and the lost creation race propagate."""
    try:
        secret = await client.get(Secret, name, namespace=namespace)
    except ApiError as error:
        if error.status.code != 404:
            raise
    else:
        return secret.data, False
    made = Secret(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=dict(labels)),
        type="Opaque", data=data(),
    )  # fmt: skip
    try:
        created = await client.create(made)
    except ApiError as error:
        if error.status.code != 409:
            raise
        return (await client.get(Secret, name, namespace=namespace)).data, False
    return created.data, True


@dataclass(frozen=True, slots=True)
class SecretContent:
    """A Secret's values (decoded) and annotations."""

    data: dict[str, bytes]
    annotations: dict[str, str]


async def read_secret(client: AsyncClient, *, namespace: str, name: str) -> SecretContent | None:
    """The Secret's content; None when it does not exist (other API errors propagate). A value
    that is not base64 reads as empty."""
    try:
        secret = await client.get(Secret, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    data = {}
    for key, value in (secret.data or {}).items():
        try:
            data[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            data[key] = b""
    annotations = dict((secret.metadata.annotations if secret.metadata else None) or {})
    return SecretContent(data, annotations)
