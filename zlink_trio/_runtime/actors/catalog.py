"""The Actors of one host: which Actor activation holds which id and which creations are running
(specs/actors.md ACT-1..ACT-9).

An ``ActorCatalog`` is made by ``open_host`` next to the ``SpotCatalog`` it reaches: an Actor is
always a member of a Spot of its host, the Entry Spot when of no other. It is the only place that
maps an ``ActorId`` to its local activation.

The context an Actor instance sees as ``self.context`` hands out the route client and the
managers, which sit above the Actors; the host binds ``make_context`` once it has built them, so
this subsystem imports none of them (architecture.md, "Inverted dependencies").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import trio

from zlink_trio._runtime.declarations.values import ActorJoinCompletion, ActorJoinOutcome
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId

__all__ = ["ActorCatalog"]

A = TypeVar("A")
"""The Actor activation type. The catalog is generic in it because ``activation.py`` imports
this module: naming ``ActorActivation`` here, even for type checking only, would close an import
cycle."""


def _unbound(activation: object) -> object:
    raise RuntimeError(f"no Actor context maker is bound for {activation!r}")


async def _here_only(activation: object, joins: list[Any], target: SpotId) -> Any:
    """Before peers are served no Spot lives elsewhere: the join finds nothing."""
    join = joins[0]
    return ActorJoinCompletion(
        ActorJoinOutcome.FAILED,
        join.join_id,
        target.value,
        error=ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {target}"),
    )


class ActorCatalog(Generic[A]):
    """The local Actor activations of one host, by id; ``ActorCatalog[ActorActivation]``."""

    def __init__(self, spots: SpotCatalog[Activation]) -> None:
        self.node: LocalNode = spots.node
        self.spots = spots
        """The host's Spots: the Entry Spot and the User Spots Actors join."""
        self.actors: dict[ActorId, A] = {}
        """Every local Actor that is Ready or closing, by id."""
        self.creating: dict[ActorId, trio.Event] = {}
        """Actor creations in progress, by id; later callers wait for the first."""
        self.live: set[A] = set()
        """Every Actor activation whose lane runs or is being created."""
        self.make_context: Callable[[A], object] = _unbound
        """Bound by the host: the context of a new instance (see the module docstring)."""
        self.join_elsewhere: Callable[
            [A, list[Any], SpotId], Awaitable[ActorJoinCompletion | None]
        ] = _here_only
        """Bound by the host once peers are served (host/joining.py): a join, with the joins
        its turn deferred after it, to a Spot not live here; its completion, or ``None`` once
        it moved the Actor to the Spot's host (activation.py Rule 6)."""
