"""NodeName: a pod with `spec.nodeName` fits only that node."""

from __future__ import annotations

from typing import Final

__all__ = ["NODE_NAME", "NODE_NAME_REASON"]

NODE_NAME: Final = "NodeName"
NODE_NAME_REASON: Final = "node(s) didn't match the requested node name"
