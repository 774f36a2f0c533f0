"""The end of one unit's move on the source, once the records name the target: the cutover
submit, the relay of what the seal kept, the open there (specs/relocation.md RELOC-31,
RELOC-60, RELOC-73, RELOC-76; the steps before it are host/moving.py's, the target's side is
routing/arrivals.py).

Rule 1: after the commit the target owns the unit. It is told so, one way (``RelocateCommit``:
it admits what others send, unrun); then everything the seal kept here, queued first and held
after, is relayed to it in order as the same sends and requests (routing/forward.py), and
``RelocateOpen`` follows on the same connection, so the target serves the relayed messages
before anything a sender sent it directly (per-sender order, RELOC-60). The three go out one
after the other, each once the one before is on its way, and only the open's answer and the
relayed requests' replies are waited for (the target's reader takes them in order, RELOC-73).
A move alone on this host commits quietly and is published to every host once the target has
answered the open (RELOC-76), so the callers' re-reads and the store's signals to every host
come after the unit serves, not while it is sealed; with other moves under way the commit
notifies as it writes (one statement more per move would cost a host relocation of many units
more than it saves). A request's reply comes back here and completes its caller's call, so
callers see one call with one outcome; whatever still reaches the sealed Spot is relayed after.
Rule 2: a move is timed from the start of its seal to the end of its cutover submit (the
one-way ``RelocateCommit`` after the commit), or to its abort: one over
``HostConfig.relocation_cutover_target`` (1 s) is logged as a warning, and goes on or ends as
it would have (RELOC-31).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from zlink_trio._runtime.declarations.system import (
    RelocateAnswer,
    RelocateCommit,
    RelocateIn,
    RelocateOpen,
)
from zlink_trio._runtime.node.envelope import Envelope, fail_one
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.authority import Claim
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.forward import relay
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId, StableTypeName

__all__ = ["MovingUnit", "cutover_ended", "hand_over", "open_there", "tell_commit"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


class Sealed(Protocol):
    """What ``SealedSpot`` and ``SealedActor`` share (spots/sealing.py, actors/sealing.py)."""

    @property
    def claim(self) -> Claim: ...

    async def capture_payload(self) -> bytes | None: ...

    def abort(self) -> None: ...

    def detach(self, forward: Callable[[Envelope], None], *, closing: bool = True) -> None: ...

    def close(self) -> None: ...


@attrs.frozen
class MovingUnit:
    """One unit on its way out: its id, how it is named on the wire and how it ends here."""

    target: SpotId | ActorId
    node: LocalNode
    sealed: Sealed
    entries: tuple[Envelope, ...]
    """What the capture took, in order: the target runs these."""
    announce: Callable[[int], RelocateIn]
    """The ``RelocateIn`` for a payload of that many chunks."""
    instance_type: StableTypeName | None
    closed: trio.Event


def cutover_ended(unit: MovingUnit, target: NodeRecord, took: float, how: str) -> None:
    """Rule 2: a move that ``took`` longer than ``relocation_cutover_target`` from the start
    of its seal is reported, whatever its end; nothing else changes (RELOC-31)."""
    bound = unit.node.config.relocation_cutover_target
    if took > bound:
        _log.warning(
            "the move of %s to %s %s %.3f s after its seal began, over the operational target "
            "of %.3f s (relocation_cutover_target)",
            unit.target,
            target.rid,
            how,
            took,
            bound,
        )


async def hand_over(
    remote: Remote,
    moved: Moved,
    units: list[MovingUnit],
    target: NodeRecord,
    quiet: bool,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> float:
    """Rule 1, once the target was told of the commit: relay what stayed here, open there,
    close here; returns
    when the target was told to open (Trio's clock). Reports started once every unit forwards
    what reaches it, before its first wait: a join's move returns then, so a relocation that
    looks at the Actor next finds it on its way out, not sealed by someone else."""
    opened: list[float] = []
    primary = units[0]
    node = primary.node
    send, receive = trio.open_memory_channel[tuple[MovingUnit, Envelope]](math.inf)

    def to_relay(unit: MovingUnit) -> Callable[[Envelope], None]:
        def relayed(envelope: Envelope) -> None:
            try:
                send.send_nowait((unit, envelope))
            except trio.ClosedResourceError:  # reached it after it closed here
                gone = f"{unit.target} moved to {target.rid}"
                fail_one(node.dispatcher, envelope, ZLinkError(ErrorKind.UNAVAILABLE, gone))

        return relayed

    for unit in units:
        # It stays registered, forwarding what reaches it, until the target opens it.
        unit.sealed.detach(to_relay(unit), closing=False)
    task_status.started()

    async def relay_to(unit: MovingUnit, envelopes: list[Envelope], replies: trio.Nursery) -> None:
        instance, to = unit.instance_type, target.rid
        await relay(
            remote, node, unit.target, instance, to, envelopes, permits_held=False, replies=replies
        )

    async def relay_all(replies: trio.Nursery) -> None:
        # What this host admitted before the commit goes first, then the target opens the
        # units (arrivals.py Rule 3); the replies are waited for beside the relay.
        try:
            for unit in units:
                await relay_to(unit, list(unit.entries), replies)
            while True:
                try:
                    unit, envelope = receive.receive_nowait()
                except trio.WouldBlock:
                    break
                await relay_to(unit, [envelope], replies)
            for unit in units:  # a sender's flush waits for what comes after this (reroute.py)
                moved.relaying_after_open(unit.target)
            await open_there(remote, primary, target)
            opened.append(trio.current_time())
            if quiet:
                replies.start_soon(_publish, units)
            for unit in reversed(units):  # the members leave before their Spot closes
                unit.sealed.close()
            async with receive:
                async for unit, envelope in receive:
                    await relay_to(unit, [envelope], replies)
        finally:
            for unit in units:  # every relay is on its way: a sender's flush may go on
                moved.relayed(unit.target)

    # The relay and the open follow the commit on one connection without a wait for an answer
    # between them: the target's reader takes them in order (moves_in.py Rule 1).
    async with trio.open_nursery() as relaying:
        relaying.start_soon(relay_all, relaying)
        for unit in units:
            await unit.closed.wait()
        send.close()
    return opened[0] if opened else trio.current_time()


async def _publish(units: list[MovingUnit]) -> None:
    """Rule 1: the commit was quiet; now that the target serves the units, every host is told
    their records changed. A failure is logged: callers still reach the units through this
    host's relay, and learn from the store once their route fails or their feed resyncs."""
    node = units[0].node
    try:
        await node.authority.announce([unit.target for unit in units])
    except ZLinkError as error:
        _log.info("could not publish that %s moved: %s", units[0].target, error)


async def tell_commit(
    remote: Remote, unit: MovingUnit, target: NodeRecord, commit: RelocateCommit
) -> None:
    """Tell the target the records name it, one way: its reader takes the word before the
    relay behind it, and the open's answer says it was taken. A failure is logged: the record
    names the target, which settles the move from the store when the word does not come
    (RELOC-66)."""
    try:
        await remote.tell(Owner(target.rid), unit.target, commit)
    except ZLinkError as error:
        _log.error("telling %s the commit of %s failed: %s", target.rid, unit.target, error)


async def open_there(remote: Remote, unit: MovingUnit, target: NodeRecord) -> None:
    """Ask the target to open the unit after the relay; a failure is logged: the record names
    the target, which owns the unit whether or not it heard (Rule 1)."""
    node = unit.node
    try:
        answer = await remote.request(
            Owner(target.rid),
            unit.target,
            RelocateOpen(),
            RelocateAnswer,
            {},
            None,
            node.clock.now() + node.config.request_timeout,
        )
        if isinstance(answer, RelocateAnswer) and not answer.ok:
            _log.error("%s did not open %s: %s", target.rid, unit.target, answer.why)
    except ZLinkError as error:
        _log.error("asking %s to open %s failed: %s", target.rid, unit.target, error)
