"""Reading environment variables the chart sets: one `EnvironmentValueError` naming the
variable, the value and what is allowed. The caller passes the environment as a mapping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tensorfusion.domain.vocabulary import IsolationPolicy

__all__ = [
    "SERVICE_ACCOUNT_TOKEN_FILE",
    "EnvironmentValueError",
    "env_bool",
    "env_isolation_policy",
    "env_port",
]

SERVICE_ACCOUNT_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where the kubelet mounts a pod's ServiceAccount token."""


class EnvironmentValueError(ValueError):
    """An environment variable a process cannot start with."""


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    """`true`/`1`/`yes` or `false`/`0`/`no` (any case); empty or unset is `default`."""
    value = env.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise EnvironmentValueError(f'{name}: invalid value "{value}": must be true or false')


def env_port(env: Mapping[str, str], name: str, default: int) -> int:
    """A TCP port 1..65535; empty or unset is `default`."""
    value = env.get(name)
    if value is None or value == "":
        return default
    if not value.strip().isdigit() or not 1 <= int(value) <= 65535:
        raise EnvironmentValueError(f'{name}: invalid value "{value}": must be a port 1..65535')
    return int(value)


def env_isolation_policy(env: Mapping[str, str], name: str) -> IsolationPolicy:
    """`TF_ISOLATION_MODE_POLICY`: static or dynamic (any case); unset is static."""
    text = env.get(name, "").strip()
    if not text:
        return IsolationPolicy.STATIC
    found = {p.value.lower(): p for p in IsolationPolicy}.get(text.lower())
    if found is None:
        raise EnvironmentValueError(f'{name}: invalid value "{text}": must be static or dynamic')
    return found
