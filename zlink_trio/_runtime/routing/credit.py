"""Per-target credit for one-way messages to other hosts (specs/overload.md OVL-2).

Rule 1: an owner whose Spot has too many messages from peers waiting for it (its backlog,
``backlog.py``) tells the senders to stop: a ``zlink.Pause`` for that Spot on the application
connection, and ``zlink.Resume`` once the backlog is short again. ``Credits`` is the sending
side's table of what is paused: a send to a paused (owner, target) waits here, before the
transport, and every other target of that owner is sent to as usual.
Rule 2: a pause never outlives its owner's run. When the owner's route is lost or its node
record goes away, every pause it sent is lifted, so the waiting sends go on to find the owner
gone (``UNAVAILABLE``) instead of waiting for ever.
Rule 3: the wait is not the caller's. A one-way send cannot be cancelled by its caller (DEC-1,
CMP-7.5): the sender waits shielded, like a send at the high-water mark (TRN-11), and the wait
ends only by a ``zlink.Resume`` (the send goes on), by its owner's loss (Rule 2, then
``UNAVAILABLE``) or by this host's shutdown: ``close()`` ends every wait, now and later, with
``SHUTTING_DOWN``, since nothing else can end a wait its caller cannot cancel. The host calls it
as its transport closes, not before: a relayed send (routing/follow.py) that waits for credit
carries a message its sender has acknowledged, and may still go out until then.
"""

from __future__ import annotations

import trio

from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId, StableTypeName

__all__ = ["PAUSE", "RESUME", "Credits"]

PAUSE = StableTypeName("zlink.Pause")
"""The framework's one-way message that pauses sends to its target (Rule 1)."""
RESUME = StableTypeName("zlink.Resume")
"""The framework's one-way message that lifts that pause (Rule 1)."""

Target = SpotId | ActorId


class Credits:
    """The sending side of the per-target credit (Rules 1-3)."""

    def __init__(self) -> None:
        self._paused: dict[tuple[NodeRid, Target], trio.Event] = {}
        self._closed = False

    def is_paused(self, owner: NodeRid, target: Target) -> bool:
        """Whether sends from this host to ``target`` at ``owner`` wait now."""
        return (owner, target) in self._paused

    async def wait(self, owner: NodeRid, target: Target) -> None:
        """Return once sending to ``target`` at ``owner`` is not paused (no checkpoint when it
        is not); shielded from the caller (Rule 3). ``SHUTTING_DOWN`` once ``close()`` ended
        it."""
        with trio.CancelScope(shield=True):
            while (lifted := self._paused.get((owner, target))) is not None:
                if self._closed:
                    raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
                await lifted.wait()

    def pause(self, owner: NodeRid, target: Target) -> None:
        self._paused.setdefault((owner, target), trio.Event())

    def resume(self, owner: NodeRid, target: Target) -> None:
        lifted = self._paused.pop((owner, target), None)
        if lifted is not None:
            lifted.set()

    def close(self) -> None:
        """Shutdown: end every wait for credit with ``SHUTTING_DOWN``, now and later (Rule 3)."""
        self._closed = True
        for lifted in self._paused.values():
            lifted.set()

    def drop_owner(self, owner: NodeRid) -> None:
        """Lift every pause ``owner`` sent (Rule 2)."""
        for key in [key for key in self._paused if key[0] == owner]:
            self._paused.pop(key).set()
