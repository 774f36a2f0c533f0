"""The source's side of one Spot's move to another host (specs/relocation.md RELOC-47..RELOC-50;
the target's side is routing/arrivals.py).

Rule 1: seal, capture, prepare. The Spot is sealed at a turn boundary (spots/sealing.py), its
timers and adapter payload captured; an adapter that fails keeps the Spot serving here
(RELOC-18). The target gets the unit in ``zlink.RelocateIn`` and the payload in chunks of at
most ``relocation_payload_chunk_limit_bytes`` (RELOC-13), each request awaited before the next.
Rule 2: the commit is one conditional write. Once the target has restored the unit, the record
this host holds is rewritten, on its version, to name the target run with the same object
generation (RELOC-23). Anything that fails before it (the target refuses or is unreachable, the
deadline passes, the record moved, this run's lease is not good) aborts: the target drops what it
prepared and the Spot serves here again as if never sealed (RELOC-36, SHUT-3.9).
Rule 3: after the commit the target owns the unit. It is told so (``RelocateCommit``: it admits
what others send, unrun); then everything the seal kept here, queued first and held after, is
relayed to it in order as the same sends and requests (routing/forward.py), and
``RelocateOpen`` follows on the same connection, so the target serves the relayed messages
before anything a sender sent it directly (per-sender order, RELOC-60). A request's reply comes
back here and completes its caller's call, so callers see one call with one outcome; whatever
still reaches the sealed Spot is relayed after. The
Spot closes here with ``RELOCATION_OUT`` and leaves the record alone, and what reaches this
host for it later is relayed for the follow window (routing/follow.py, RELOC-49).
"""

from __future__ import annotations

import logging
import math

import cbor2
import trio

from zlink_trio._runtime.declarations.system import (
    RelocateAbort,
    RelocateAnswer,
    RelocateChunk,
    RelocateCommit,
    RelocateIn,
    RelocateOpen,
)
from zlink_trio._runtime.node.envelope import Envelope, fail_one
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.forward import forward
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.sealing import SealedSpot, seal
from zlink_trio._runtime.spots.transfer import payload_chunks, timer_state_to_wire
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.options import RelocationReason

__all__ = ["move_spot"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


async def move_spot(
    remote: Remote, moved: Moved, activation: Activation, target: NodeRecord, deadline: float
) -> RelocationReason | None:
    """Move ``activation`` to ``target`` before ``deadline`` (Trio's clock); ``None`` once the
    target owns it, else why it stayed here (Rules 1-3)."""
    node = activation.node
    with trio.move_on_at(deadline):
        await activation.settled.wait()  # a Spot still activating is moved once it is Ready
    try:
        sealed = await seal(activation)
    except ZLinkError as error:
        _log.info("%s cannot be moved now: %s", activation.spot_id, error)
        return RelocationReason.STATE_INCOMPATIBLE
    try:
        snapshot = sealed.capture()
        payload = await sealed.capture_payload()
    except Exception as error:
        _log.warning("capturing %s failed; it serves on here: %s", activation.spot_id, error)
        sealed.abort()
        return RelocationReason.STATE_INCOMPATIBLE
    owner = Owner(target.rid)
    spot_id = activation.spot_id
    limit = node.config.relocation_payload_chunk_limit_bytes
    chunks = [] if payload is None else payload_chunks(payload, limit)
    timers = cbor2.dumps([timer_state_to_wire(state) for state in snapshot.timers])

    async def ask(message: object) -> RelocateAnswer:
        left = deadline - trio.current_time()
        if left <= 0:
            raise trio.TooSlowError
        answer = await remote.request(
            owner, spot_id, message, RelocateAnswer, {}, None, node.clock.now() + left
        )
        assert isinstance(answer, RelocateAnswer)  # remote.request checked the reply's class
        return answer

    handed = None
    reason = RelocationReason.RELOCATION_FAILED
    try:
        kind, name = int(activation.kind), activation.spot_type.name.value
        answer = await ask(RelocateIn(kind, name, snapshot.generation.value, timers, len(chunks)))
        for index, chunk in enumerate(chunks):
            if not answer.ok:
                break
            answer = await ask(RelocateChunk(index, len(chunks), chunk))
        if not answer.ok:
            _log.warning("%s refused %s: %s", target.rid, spot_id, answer.why)
            reason = RelocationReason.STATE_INCOMPATIBLE
        else:
            node.fence.check()
            handed = await node.authority.hand_over(sealed.claim, target.rid, target.generation)
    except trio.TooSlowError:
        reason = RelocationReason.DEADLINE_EXCEEDED
    except ZLinkError as error:
        _log.warning("moving %s to %s failed before its commit: %s", spot_id, target.rid, error)
    if handed is None:
        with trio.CancelScope(shield=True), trio.move_on_after(node.config.request_timeout):
            try:
                await ask(RelocateAbort())
            except (ZLinkError, trio.TooSlowError) as error:
                _log.info("could not tell %s to drop %s: %s", target.rid, spot_id, error)
        sealed.abort()
        return reason
    # From its close on, what still reaches this host for it is relayed (routing/follow.py).
    moved.follow(spot_id, target.rid)
    await _hand_over(remote, sealed, activation, target, handed.version, snapshot.entries)
    return None


async def _hand_over(
    remote: Remote,
    sealed: SealedSpot,
    activation: Activation,
    target: NodeRecord,
    version: int,
    captured: tuple[Envelope, ...],
) -> None:
    """Rule 3: commit on the target, relay what stayed here, open there, close here."""
    await _tell(remote, activation, target, RelocateCommit(version))
    send, receive = trio.open_memory_channel[Envelope](math.inf)
    node = activation.node

    def to_relay(envelope: Envelope) -> None:
        try:
            send.send_nowait(envelope)
        except trio.ClosedResourceError:  # reached the Spot after it closed here
            gone = f"{activation.spot_id} moved to {target.rid}"
            fail_one(node.dispatcher, envelope, ZLinkError(ErrorKind.UNAVAILABLE, gone))

    # It stays registered, forwarding what reaches it, until the target opens it.
    sealed.detach(to_relay, closing=False)

    async def relay(replies: trio.Nursery) -> None:
        # What this host admitted before the commit goes first, then the target opens the unit
        # (arrivals.py Rule 3); the replies are waited for beside the relay.
        first = list(captured)
        while True:
            try:
                first.append(receive.receive_nowait())
            except trio.WouldBlock:
                break
        await forward(remote, activation, target.rid, first, permits_held=False, replies=replies)
        await _tell(remote, activation, target, RelocateOpen())
        sealed.close()
        async with receive:
            async for envelope in receive:
                await forward(
                    remote, activation, target.rid, [envelope], permits_held=False, replies=replies
                )

    async with trio.open_nursery() as relaying:
        relaying.start_soon(relay, relaying)
        await activation.closed.wait()
        send.close()


async def _tell(remote: Remote, activation: Activation, target: NodeRecord, what: object) -> None:
    """Send the target one of the move's requests after the commit; a failure is logged: the
    record names the target, which owns the unit whether or not it heard (Rule 3)."""
    node = activation.node
    try:
        answer = await remote.request(
            Owner(target.rid),
            activation.spot_id,
            what,
            RelocateAnswer,
            {},
            None,
            node.clock.now() + node.config.request_timeout,
        )
        if isinstance(answer, RelocateAnswer) and not answer.ok:
            spot_id, why = activation.spot_id, answer.why
            _log.error("%s answered %r for %s: %s", target.rid, what, spot_id, why)
    except ZLinkError as error:
        _log.error("telling %s %r for %s failed: %s", target.rid, what, activation.spot_id, error)
