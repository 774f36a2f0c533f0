"""Per-sender order when a sender's route to a target changes (specs/relocation.md RELOC-70).

A sender that reached a target at host O, and whose routing cache forgot O because the store
changed (a move committed), may have messages still on their way to O: O relays them to the
new owner N (routing/follow.py), but a message the sender sends N directly could get there
first. So the first call after such a change asks O before it goes to N.

Rule 1: the sender remembers the owner the cache forgot on a store change (``forgot``), for
the follow window (``HostConfig.relocation_follow_window``; after it O relays nothing); a host
that admits a unit moving to it remembers the unit's source the same way, for its own calls
(one may have been on its way to the source when the unit arrived). Its next call to the
target that goes anywhere but O (messaging.py: to a unit here, or to the owner the store
names) first sends O, if still a live peer, ``zlink.Flush`` for the target on the same
connection as its earlier messages and waits for the answer (bounded by the call's deadline
and ``request_timeout``); calls to the same target that come meanwhile wait for that answer
too. A flush that fails is logged and the call goes on: order is then as before, never a lost
or failed call.
Rule 2: O answers once everything it had for the target has reached N, or is sure to be served
there first. Its reader handles the flush after the sender's earlier messages, each already
relayed in order (RELOC-68). While the target is sealed here, and until its move has relayed
what waited and tells N to open, whatever O holds is relayed before N serves the target (N
holds every other message until then, RELOC-60): O answers at once, never waiting for its own
move (a sender on N may flush while N has not answered the commit yet). Once the move tells N
to open, what still reaches the target here is relayed after that, and O waits for that relay
(``Moved.wait_relayed``). If it follows the target to N, it sends N a flush of its own on the
connection its relays took and answers when N does; N's reader answers after the relays ahead
of it have been admitted, and for any parked in the target's backlog once the backlog has
drained (backlog.py ``wait_drained``: this host's own calls do not queue behind a backlog).
A target O does not follow is answered at once, its backlog drained.
"""

from __future__ import annotations

import logging

import trio

from zlink_trio._runtime.declarations.system import Flush, RelocateAnswer
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.owner import Owner, Target
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import NodeRid

__all__ = ["Reroutes", "answer_flush"]

_log = logging.getLogger("zlink_trio.runtime.relocation")

_PRUNE_AT = 4096
"""Remembered owners past which the expired ones are dropped at the next ``forgot``."""


class Reroutes:
    """A sender's memory of the owners its routing cache forgot (Rule 1)."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node
        self._previous: dict[Target, tuple[NodeRid, float]] = {}
        self._flushing: dict[Target, trio.Event] = {}

    def forgot(self, target: Target, owner: NodeRid) -> None:
        """The cache forgot that ``owner`` has ``target`` because the store changed."""
        now = trio.current_time()
        if len(self._previous) >= _PRUNE_AT:
            for stale in [t for t, (_, until) in self._previous.items() if until <= now]:
                del self._previous[stale]
        self._previous[target] = (owner, now + self._node.config.relocation_follow_window)

    @property
    def waiting(self) -> bool:
        """Whether any call may have a route to flush first (the hot path's cheap check)."""
        return bool(self._previous or self._flushing)

    async def settle(
        self, remote: Remote | None, target: Target, to: NodeRid, deadline: float
    ) -> None:
        """Before a call to ``target`` goes to ``to`` (this host's own id: here): flush the
        route the cache forgot (Rule 1). Returns at once when there is none, or when the call
        takes that route too (the remembered owner stays remembered), or without ``remote``
        (nothing was ever forgotten)."""
        if remote is None:
            return
        while (flushing := self._flushing.get(target)) is not None:
            await flushing.wait()
        previous = self._previous.get(target)
        if previous is None:
            return
        old, until = previous
        expired = trio.current_time() >= until
        if old == to and not expired:
            return  # this call takes that route too: the next one elsewhere flushes it
        del self._previous[target]
        if expired or old == to or remote.peer_record(old) is None:
            return
        node = self._node
        done = self._flushing[target] = trio.Event()
        try:
            bounded = min(deadline, node.clock.now() + node.config.request_timeout)
            await remote.request(Owner(old), target, Flush(), RelocateAnswer, {}, None, bounded)
        except ZLinkError as error:
            _log.info("flushing the route to %s at %s failed: %s", target, old, error)
        finally:
            del self._flushing[target]
            done.set()


async def answer_flush(
    node: LocalNode, remote: Remote, moved: Moved, target: Target
) -> RelocateAnswer:
    """This host's answer to a sender's ``zlink.Flush`` for ``target`` (Rule 2)."""
    await moved.wait_relayed(target)
    followed = moved.followed(target, remote, count=False)
    if followed is None:
        return RelocateAnswer(True)
    relay, owner = followed
    deadline = node.clock.now() + node.config.request_timeout
    answer = await relay.request(owner, target, Flush(), RelocateAnswer, {}, None, deadline)
    assert isinstance(answer, RelocateAnswer)  # request checked the reply's class
    return answer
