"""No record of the package shows a credential in its repr (issue 23, scope 7): every dataclass
field named like a password, token, authorization header or private key is `repr=False`."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re

import tensorfusion

# A field holding the secret itself; names of files, Secrets or keys inside a Secret are not.
SECRET_FIELD = re.compile(
    r"(password|passwd|token|authorization|key_pem|seal_key|bearer)$|^(password|token)\b"
)
NOT_A_SECRET = re.compile(r"(_file|_path|_secret|_secret_key|_key_name|_header)$")
# Opaque ids named "token" that guard nothing (the native scheduling view's cache keys).
NOT_CREDENTIALS = frozenset({
    "NativeCluster._next_token", "PodNativeView.token", "_PodClass.token",
})  # fmt: skip


def package_dataclasses() -> list[type]:
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(tensorfusion.__path__, "tensorfusion."):
        if module.name.startswith("tensorfusion.cli"):
            continue
        loaded = importlib.import_module(module.name)
        for value in vars(loaded).values():
            if (dataclasses.is_dataclass(value) and isinstance(value, type)
                    and value.__module__.startswith("tensorfusion.")):  # fmt: skip
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_no_credential_field_is_in_a_repr() -> None:
    shown = []
    for cls in package_dataclasses():
        for item in dataclasses.fields(cls):
            name = item.name.lstrip("_")
            if f"{cls.__qualname__}.{item.name}" in NOT_CREDENTIALS or NOT_A_SECRET.search(name):
                continue
            if SECRET_FIELD.search(name) and item.repr:
                shown.append(f"{cls.__module__}.{cls.__qualname__}.{item.name}")
    assert not shown, f"credentials in reprs: {shown}"


def test_the_check_sees_the_known_credential_fields() -> None:
    names = {
        f"{cls.__qualname__}.{item.name}"
        for cls in package_dataclasses()
        for item in dataclasses.fields(cls)
        if SECRET_FIELD.search(item.name.lstrip("_"))
    }
    assert {"CertificateBundle.key_pem", "WriteEndpoint.authorization",
            "HypervisorEnvironment.metrics_write_password", "AllocatorState.seal_key",
            "Allocator.seal_key"} <= names  # fmt: skip
