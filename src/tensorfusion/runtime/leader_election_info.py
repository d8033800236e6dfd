"""Where followers find the leader: ConfigMap ``tensor-fusion-operator-leader-info``.

The leader writes its ``POD_IP`` under the key ``leader-ip`` (the reference implementation's
names); a follower reads it to forward ``/api/*`` requests. The write is a leader-only write, so
it is fenced: :func:`publish_leader_ip` calls ``fence`` (``LeaderElector.fence``) before every
attempt and bounds the attempt by the time the fence says is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import httpx
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

__all__ = [
    "LEADER_INFO_CONFIGMAP",
    "LEADER_INFO_FIELD_MANAGER",
    "LEADER_IP_KEY",
    "publish_leader_ip",
    "read_leader_ip",
]

_log = logging.getLogger(__name__)

LEADER_INFO_CONFIGMAP: Final = "tensor-fusion-operator-leader-info"
LEADER_IP_KEY: Final = "leader-ip"
LEADER_INFO_FIELD_MANAGER: Final = "tensor-fusion-leader-election"


async def publish_leader_ip(
    client: AsyncClient,
    namespace: str,
    pod_ip: str,
    *,
    fence: Callable[[], float],
    retry_period: float = 2.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Writes ``pod_ip`` to the leader-info ConfigMap (created or updated by server-side apply).

    ``fence`` runs before every attempt: it raises (``NotLeaderError``) when this process may not
    write as the leader, which ends this function with that error; otherwise it returns the
    seconds the leadership is known to last, and the attempt is cut off after that long. API
    errors are logged and retried every ``retry_period`` seconds.
    """
    if not pod_ip:
        raise ValueError("the leader's pod IP is empty (is POD_IP set from status.podIP?)")
    body = ConfigMap(
        metadata=ObjectMeta(name=LEADER_INFO_CONFIGMAP, namespace=namespace),
        data={LEADER_IP_KEY: pod_ip},
    )
    while True:
        left = fence()
        try:
            async with asyncio.timeout(left):
                await client.apply(body, field_manager=LEADER_INFO_FIELD_MANAGER, force=True)
        except TimeoutError:
            _log.warning(
                "leader info: writing ConfigMap %s/%s timed out", namespace, LEADER_INFO_CONFIGMAP
            )
        except (ApiError, httpx.HTTPError) as error:
            _log.warning(
                "leader info: writing ConfigMap %s/%s failed: %s; retrying in %.1fs",
                namespace,
                LEADER_INFO_CONFIGMAP,
                error,
                retry_period,
            )
        else:
            _log.info(
                "leader info: ConfigMap %s/%s says %s=%s",
                namespace,
                LEADER_INFO_CONFIGMAP,
                LEADER_IP_KEY,
                pod_ip,
            )
            return
        await sleep(retry_period)


async def read_leader_ip(client: AsyncClient, namespace: str) -> str | None:
    """The leader's IP from the leader-info ConfigMap; None while there is none.

    Other API errors are raised: the caller decides (a forwarding follower answers 503).
    """
    try:
        config_map = await client.get(ConfigMap, LEADER_INFO_CONFIGMAP, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    return (config_map.data or {}).get(LEADER_IP_KEY) or None
