"""Where followers find the leader: the Lease's holder and that Pod's IP, read through the API.

The Lease names the holder (the replica's ``POD_NAME``); only the controller's ServiceAccount
may write it, and only the kubelet of the Pod's node writes the Pod's ``status.podIP``, so the
address is as trustworthy as the API server (the reference read it from a ConfigMap that anyone
able to edit ConfigMaps there could point elsewhere). The peer's certificate is checked on
top of that by the caller (`api_server.peer_client`).
"""

from __future__ import annotations

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod

__all__ = ["read_leader_ip"]


async def read_leader_ip(client: AsyncClient, namespace: str, lease_name: str) -> str | None:
    """The IP of the Pod that holds the Lease; None while there is no holder, no such Pod in
    ``namespace`` or no IP yet. Other API errors are raised: the caller decides (a forwarding
    follower answers 503)."""
    try:
        lease = await client.get(Lease, lease_name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    holder = lease.spec.holderIdentity if lease.spec else None
    if not holder:
        return None
    try:
        pod = await client.get(Pod, holder, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    return (pod.status.podIP if pod.status else None) or None
