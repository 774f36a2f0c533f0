"""The Spots of one host: which activation holds which id, which creations are running, and the
Entry Spot (specs/spots.md SPOT-2, SPOT-15; specs/shutdown.md SHUT-4.8).

A ``SpotCatalog`` is made by ``open_host`` and shared by the Spot subsystem, the Actors (whose
members and Entry Spot are Spots), routing and the host's shutdown. It is the only place that
maps a ``SpotId`` to its local activation.

Two things the Spot subsystem needs come from above it and are handed in as callables once the
host has built them, so this subsystem imports neither (architecture.md, "Inverted
dependencies"):

- ``make_context(activation)``: the ``SpotContext`` an instance sees as ``self.context``; the
  context hands out the route client and the managers, which sit above the Spots.
- ``forward(activation, owner, envelopes)``: hands what a cold activation that lost its claim
  had admitted to the winning host (activation.py Rule 7), whose job permits the activation
  gave back already; routing owns the wire, so routing provides it. ``None`` while the host
  has no transport (before it starts serving peers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import trio

from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid, SpotId

__all__ = ["SpotCatalog"]

A = TypeVar("A")
"""The activation type. The catalog is generic in it because ``activation.py`` imports this
module: naming ``Activation`` here, even for type checking only, would close an import cycle."""


def _unbound(activation: object) -> object:
    raise RuntimeError(f"no Spot context maker is bound for {activation!r}")


class SpotCatalog(Generic[A]):
    """The local activations of one host, by id; ``SpotCatalog[Activation]`` everywhere."""

    def __init__(self, node: LocalNode) -> None:
        self.node = node
        self.activations: dict[SpotId, A] = {}
        """Every local activation that can take messages or is closing, by id."""
        self.creating: dict[SpotId, trio.Event] = {}
        """User Spot creations in progress, by id; later callers wait for the first (SPOT-15)."""
        self.creating_until: dict[SpotId, float] = {}
        """Each creation's deadline, on the host's application clock: a send waiting for it
        stops once it is overdue (routing/local.py Rule 6)."""
        self.live: set[A] = set()
        """Every activation whose task runs, including User Spots still being created."""
        self.make_context: Callable[[A], object] = _unbound
        """Bound by the host: the context of a new instance (see the module docstring)."""
        self.forward: Callable[[A, NodeRid, list[Envelope]], Awaitable[None]] | None = None
        """Bound by the host once peers are served (see the module docstring)."""
        self._entry: A | None = None

    @property
    def entry(self) -> A:
        """This host's Entry Spot, made when the host starts."""
        if self._entry is None:
            raise ZLinkError(ErrorKind.UNAVAILABLE, "the Entry Spot has not started yet")
        return self._entry

    @entry.setter
    def entry(self, activation: A) -> None:
        self._entry = activation
