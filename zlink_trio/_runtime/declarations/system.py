"""The framework's own messages between hosts (specs/spots.md SPOT-92).

Every registry carries them under names in the reserved ``zlink.`` namespace; an application
that declares a message name in that namespace gets a ``ConfigurationError`` at start. They
travel as ordinary Requests and are answered by the owner host's inbound side
(``routing/inbound.py``), never by a handler of the application.
"""

from __future__ import annotations

import attrs

from zlink_trio.ids import StableTypeName

__all__ = ["CLOSE_SPOT", "RESERVED_PREFIX", "SYSTEM_MESSAGES", "CloseSpot", "SpotClosed"]

RESERVED_PREFIX = "zlink."
"""Message names the framework keeps for its own messages (also ``zlink.Pause`` and
``zlink.Resume``, routing/credit.py, which carry no payload and are never decoded)."""


@attrs.frozen
class CloseSpot:
    """Close the User Spot incarnation of the target id with this object generation."""

    generation: int


@attrs.frozen
class SpotClosed:
    """The answer to ``CloseSpot``: what ``spots.close`` returned on the owner."""

    closed: bool


CLOSE_SPOT = StableTypeName("zlink.CloseSpot")

SYSTEM_MESSAGES: tuple[tuple[StableTypeName, type], ...] = (
    (CLOSE_SPOT, CloseSpot),
    (StableTypeName("zlink.SpotClosed"), SpotClosed),
)
