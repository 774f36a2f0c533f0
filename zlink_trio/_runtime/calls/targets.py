"""Strings become identifiers once, at the call site (specs/identifiers.md ID-6.4; specs/errors.md
ERR-3.1): a ``str`` is converted to the id type, an id passes as it is, anything else is a
``TypeError`` before anything is submitted."""

from __future__ import annotations

from zlink_trio.ids import ActorId, SpotId

__all__ = ["actor_id_of", "spot_id_of"]


def spot_id_of(value: object) -> SpotId:
    """``value`` as a SpotId: a ``SpotId`` or a ``str``; anything else is a ``TypeError``."""
    if isinstance(value, SpotId):
        return value
    if isinstance(value, str):
        return SpotId(value)
    raise TypeError(f"a Spot is addressed by a SpotId or str, not {type(value).__name__}")


def actor_id_of(value: object) -> ActorId:
    """``value`` as an ActorId: an ``ActorId`` or a ``str``; anything else is a ``TypeError``."""
    if isinstance(value, ActorId):
        return value
    if isinstance(value, str):
        return ActorId(value)
    raise TypeError(f"an Actor is addressed by an ActorId or str, not {type(value).__name__}")
