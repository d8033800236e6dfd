"""Stable hashes and generated-name suffixes used by admission (no randomness of its own)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any, Final

from tensorfusion.domain.model import GPUPool, to_wire
from tensorfusion.domain.object_views import annotations_of, labels_of

__all__ = [
    "NAME_SUFFIX_ALPHABET",
    "NAME_SUFFIX_LENGTH",
    "client_config_hash",
    "hashed_name_suffix",
    "pod_template_hash",
    "random_name_suffix",
    "stable_hash",
]

# `[1-9a-km-y]`: no 0, l or z (admission.md §4 step 3).
NAME_SUFFIX_ALPHABET: Final = "123456789abcdefghijkmnopqrstuvwxy"
NAME_SUFFIX_LENGTH: Final = 8


def stable_hash(value: Any) -> str:
    """16 hex digits of SHA-256 over canonical JSON (sorted keys, compact)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def client_config_hash(pool: GPUPool | None) -> str:
    """Hash of the pool's `spec.componentConfig.client` as written (label `pod-template-hash`
    of TF pods; `{}` when absent).

    The pool controller must compute the client component hash with this same function.
    """
    client = None if pool is None else pool.spec.component_config.client
    return stable_hash({} if client is None else to_wire(client, exclude_unset=True))


def pod_template_hash(pod: Mapping[str, Any]) -> str:
    """Hash of a pod's template: its labels, annotations and spec (enabled-replicas counter)."""
    return stable_hash(
        {
            "labels": labels_of(pod),
            "annotations": annotations_of(pod),
            "spec": pod.get("spec") or {},
        }
    )


def random_name_suffix(rng: random.Random) -> str:
    """8 characters of `[1-9a-km-y]` drawn from `rng` (the caller owns the random source)."""
    return "".join(rng.choice(NAME_SUFFIX_ALPHABET) for _ in range(NAME_SUFFIX_LENGTH))


def hashed_name_suffix(seed: str) -> str:
    """8 characters of `[1-9a-km-y]` derived from `seed` (deterministic, for dry runs)."""
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    out = []
    for _ in range(NAME_SUFFIX_LENGTH):
        number, digit = divmod(number, len(NAME_SUFFIX_ALPHABET))
        out.append(NAME_SUFFIX_ALPHABET[digit])
    return "".join(out)
