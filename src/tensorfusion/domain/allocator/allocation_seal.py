"""The allocation seal: proof that a worker pod's `gpu-ids` were written by the TensorFusion
scheduler (scheduling.md §12, "Sealed allocations").

`gpu-ids` on a pod is only a claim: anyone who may create pods may write it, with `nodeName`
set, skipping the webhook and the scheduler. The extender's bind patch therefore also writes
`tensor-fusion.ai/allocation-seal`, an HMAC-SHA256 (key from the release's Secret) over the
pod's uid, node and GPUs; the uid makes a seal useless on any other pod. A leader restores or
adopts a bound worker only when its seal matches, or when every GPU it names already lists the
pod's uid in `status.runningApps` (committed by an earlier leader: pods bound before sealing
existed, or before the key was replaced). An empty key turns sealing off (the simulator).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from tensorfusion.domain.annotations import KEYS
from tensorfusion.domain.object_views import annotations_of, uid_of

__all__ = [
    "KEY_FIELD",
    "MIN_KEY_BYTES",
    "UNSEALED_REASON",
    "SealKeyError",
    "read_seal_key",
    "seal",
    "seal_key_data",
    "seal_problem",
]

_VERSION: Final = "v1"
MIN_KEY_BYTES: Final = 32
UNSEALED_REASON: Final = "UnsealedAllocation"
"""Event reason for a bound worker whose allocation the scheduler did not write."""
KEY_FIELD: Final = "key"
"""The field of the Secret's `data` holding the key."""


class SealKeyError(ValueError):
    """The Secret holds no usable key."""


def read_seal_key(data: Mapping[str, str] | None) -> bytes:
    """The key of a Secret's `data` (base64 values); SealKeyError when absent or short."""
    text = (data or {}).get(KEY_FIELD)
    if not text:
        raise SealKeyError(f"data.{KEY_FIELD} is missing")
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError:
        raise SealKeyError(f"data.{KEY_FIELD} is not base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise SealKeyError(
            f"data.{KEY_FIELD} holds {len(key)} bytes, at least {MIN_KEY_BYTES} are needed"
        )
    return key


def seal_key_data(key: bytes) -> dict[str, str]:
    """The Secret `data` holding `key`."""
    return {KEY_FIELD: base64.b64encode(key).decode()}


def seal(key: bytes, *, uid: str, node: str, gpus: Sequence[str]) -> str:
    """The seal of an allocation of `gpus` on `node` to the pod `uid`."""
    message = "\n".join((_VERSION, uid, node, ",".join(gpus))).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return f"{_VERSION}.{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def seal_problem(
    pod: Mapping[str, Any],
    gpus: Sequence[str],
    key: bytes,
    committed: Callable[[str], frozenset[str]],
) -> str | None:
    """Why the pod's allocation of `gpus` is not the scheduler's; None when its seal matches,
    when every GPU lists the pod as committed (`committed(gpu)`: the uids of the GPU object's
    `runningApps`), or when sealing is off (empty key)."""
    if not key:
        return None
    uid = uid_of(pod)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    found = str(annotations_of(pod).get(KEYS.allocation_seal) or "")
    if uid and found and hmac.compare_digest(found, seal(key, uid=uid, node=node, gpus=gpus)):
        return None
    missing = [gpu for gpu in gpus if not uid or uid not in committed(gpu)]
    if not missing:
        return None
    state = "does not match" if found else "is missing"
    return (
        f"{KEYS.gpu_ids} was not written by the TensorFusion scheduler: its "
        f"{KEYS.allocation_seal} {state} and {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not committed to this pod; "
        "its GPUs are not given (delete the pod and let the scheduler place it)"
    )
