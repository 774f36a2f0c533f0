"""The framework's own messages between hosts (specs/spots.md SPOT-92).

Every registry carries them under names in the reserved ``zlink.`` namespace; an application
that declares a message name in that namespace gets a ``ConfigurationError`` at start. They
travel as ordinary Requests and are answered by the owner host's inbound side
(``routing/inbound.py``), never by a handler of the application.
"""

from __future__ import annotations

import attrs

from zlink_trio.ids import StableTypeName

__all__ = [
    "CLOSE_SPOT",
    "FLUSH",
    "LEAVING",
    "RELOCATE",
    "RELOCATE_CHUNK",
    "RELOCATE_COMMIT",
    "RELOCATE_OPEN",
    "RESERVED_PREFIX",
    "SYSTEM_MESSAGES",
    "CloseSpot",
    "Flush",
    "Leaving",
    "RelocateAbort",
    "RelocateAnswer",
    "RelocateBegin",
    "RelocateChunk",
    "RelocateCommit",
    "RelocateIn",
    "RelocateOpen",
    "SpotClosed",
]

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


@attrs.frozen
class RelocateIn:
    """A source host moves the target Spot here (host/moving.py): what the unit is, its timers
    (``spots/transfer.py`` wire data, CBOR-encoded) and how many payload chunks follow (0: the
    type has no adapter)."""

    kind: int
    type_name: str
    generation: int
    timers: bytes
    chunks: int
    spot: str | None = None
    """For an Actor that moves with its User Spot: that Spot's id (its ``RelocateIn`` came
    first); for an Actor that a join moves (``join``): the Spot it joins, live on the target;
    ``None`` for an Actor of the Entry Spot and for a Spot."""
    join: bytes = b""
    """A join moves the Actor (ACT-27): the join's id (16 bytes, big-endian); empty otherwise.
    The target asks ``spot``'s ``on_actor_join`` before it restores anything."""
    request_type: str = ""
    """The join's request for ``on_actor_join``: its stable name (empty: no request)..."""
    request: bytes = b""
    """...and its payload."""
    later_joins: tuple[tuple[bytes, str], ...] = ()
    """Joins the same turn deferred after ``join`` (id, Spot id): they do not run; each ends
    ``FAILED`` on the target after the join's own completion."""
    payload: bytes | None = None
    """The whole adapter payload, when it is one chunk and fits in this message with the rest
    (``chunks`` is then 1 and no ``RelocateChunk`` follows): one round trip less (RELOC-71)."""
    ready: bool = False
    """A Spot sealed at the boundary it signalled: the target tells the restored instance
    ``RELOCATED`` before anything runs (spots/boundary.py Rule 3)."""


@attrs.frozen
class RelocateBegin:
    """The source relocates to this host: answered once this host's view of the source's node
    record says ``relocating`` (or after a short bound), before the source seals anything
    (host/relocation.py Rule 6, RELOC-74)."""


@attrs.frozen
class RelocateChunk:
    """Chunk ``index`` of ``count`` of the moving Spot's adapter payload (RELOC-46)."""

    index: int
    count: int
    data: bytes


@attrs.frozen
class RelocateCommit:
    """The authority record now names the target at ``version``: take the unit's messages
    (what the source relays first, then the rest), and serve it at ``RelocateOpen``."""

    version: int
    members: tuple[tuple[str, int], ...] = ()
    """The member Actors that moved with the Spot, each with its record's version."""


@attrs.frozen
class RelocateOpen:
    """Everything the source relays first has been sent before this: serve the unit."""


@attrs.frozen
class RelocateAbort:
    """The move of the target Spot ended before its commit: drop what was prepared."""


@attrs.frozen
class RelocateAnswer:
    """The answer to every ``zlink.Relocate*`` request: done, or why not."""

    ok: bool
    why: str = ""
    kind: int = 0
    """For a join's ``RelocateIn`` that failed: the ``ErrorKind`` of the join's failure (0: none
    in particular)."""
    rejected: bool = False
    """For a join's ``RelocateIn``: ``on_actor_join`` rejected it, with this reply..."""
    reply_type: str = ""
    """...of this stable name (empty: no reply)..."""
    reply: bytes = b""
    """...and this payload."""


@attrs.frozen
class Flush:
    """A sender that reached the target at this host before and now finds it elsewhere asks
    here first: answered (``RelocateAnswer``) once what it sent here before has reached the
    target's new owner (routing/reroute.py, RELOC-55)."""


@attrs.frozen
class Leaving:
    """The asking host stops after its relocation: drop every route that names it, make sure
    what was sent to it before has reached it (a ``Flush`` to it), then answer
    (``RelocateAnswer``; routing/leaving.py, RELOC-78)."""


CLOSE_SPOT = StableTypeName("zlink.CloseSpot")
FLUSH = StableTypeName("zlink.Flush")
LEAVING = StableTypeName("zlink.Leaving")
RELOCATE_OPEN = StableTypeName("zlink.RelocateOpen")
RELOCATE_CHUNK = StableTypeName("zlink.RelocateChunk")
RELOCATE_COMMIT = StableTypeName("zlink.RelocateCommit")
RELOCATE = frozenset(
    {
        "zlink.RelocateBegin",
        "zlink.RelocateIn",
        "zlink.RelocateChunk",
        "zlink.RelocateCommit",
        "zlink.RelocateOpen",
        "zlink.RelocateAbort",
    }
)
"""The framework's requests of a Spot's move, answered by ``routing/arrivals.py``."""

SYSTEM_MESSAGES: tuple[tuple[StableTypeName, type], ...] = (
    (CLOSE_SPOT, CloseSpot),
    (StableTypeName("zlink.SpotClosed"), SpotClosed),
    (StableTypeName("zlink.RelocateBegin"), RelocateBegin),
    (StableTypeName("zlink.RelocateIn"), RelocateIn),
    (StableTypeName("zlink.RelocateChunk"), RelocateChunk),
    (StableTypeName("zlink.RelocateCommit"), RelocateCommit),
    (StableTypeName("zlink.RelocateOpen"), RelocateOpen),
    (StableTypeName("zlink.RelocateAbort"), RelocateAbort),
    (StableTypeName("zlink.RelocateAnswer"), RelocateAnswer),
    (FLUSH, Flush),
    (LEAVING, Leaving),
)
