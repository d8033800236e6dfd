"""What the controller needs of a leader-only reconciler, and the record that registers one.

A `Registration` names the reconciler (its leader task and its writer's metrics label), lists
the informer handlers it takes (registered on every replica, in order: the queues only collect
keys), its work queues and its API writer; `run()` runs while the replica leads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tensorfusion.controller.fenced_writes import FencedWriter
from tensorfusion.controller.reconcile_loop import ReconcileLoop
from tensorfusion.runtime.informer import Handler

__all__ = ["HandlerSource", "Reconciler", "Registration", "register_handlers"]


class Reconciler(Protocol):
    """A leader-only reconciler: started when leadership begins, cancelled when it ends."""

    def run(self) -> Awaitable[None]:
        """Work until cancelled."""
        ...


class HandlerSource(Protocol):
    """An informer (or cache) that calls handlers on changes."""

    def add_handler(self, handler: Handler) -> None:
        """Call `handler` for every change."""
        ...


@dataclass(frozen=True, slots=True)
class Registration:
    """One reconciler as the controller wires and runs it."""

    name: str
    reconciler: Reconciler
    handlers: Sequence[tuple[HandlerSource, Handler]] = ()
    """The informer events it handles: (source, handler), registered in this order."""
    loops: Sequence[ReconcileLoop[Any]] = ()
    """Its work queues, for `/metrics` (none for one on a timer)."""
    writer: FencedWriter | None = None
    """Its API writer, for `/metrics`."""


def register_handlers(registrations: Sequence[Registration]) -> None:
    """Add every registration's handlers to their sources, in list order."""
    for registration in registrations:
        for source, handler in registration.handlers:
            source.add_handler(handler)
