"""Object metadata, conditions and the common shape of every TensorFusion object."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from tensorfusion.domain.model.base import Int64, Timestamp, WireModel

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "Condition",
    "KubeObject",
    "ObjectMeta",
    "OwnerReference",
]

API_GROUP: Final = "tensor-fusion.ai"
API_VERSION: Final = f"{API_GROUP}/v1"


class OwnerReference(WireModel):
    """A reference to the owning object (``metadata.ownerReferences[]``)."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(WireModel):
    """The subset of Kubernetes ``ObjectMeta`` the control plane reads; other keys are kept."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list)
    resource_version: str | None = None
    generation: Int64 | None = None
    finalizers: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _omit_untouched_empty(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave out empty collections that were neither loaded nor assigned."""
        data = handler(self)
        if isinstance(data, dict):
            for name in _COLLECTIONS:
                if name not in self.model_fields_set and not getattr(self, name):
                    data.pop(name, None)
                    data.pop(_COLLECTIONS[name], None)
        return data


_COLLECTIONS: Final = {
    "labels": "labels",
    "annotations": "annotations",
    "owner_references": "ownerReferences",
    "finalizers": "finalizers",
}


class Condition(WireModel):
    """A status condition (Kubernetes ``metav1.Condition``)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: Timestamp | None = None
    observed_generation: Int64 | None = None


class KubeObject(WireModel):
    """Fields shared by every kind: ``apiVersion``, ``kind`` and ``metadata``."""

    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
