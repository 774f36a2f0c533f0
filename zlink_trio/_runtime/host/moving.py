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
Rule 3: after the commit the target owns the unit. It is told to open it; then everything the
seal kept here, queued first and held after, and whatever still reaches the sealed Spot, is
relayed to it in order as the same sends and requests (routing/forward.py): a request's reply
comes back here and completes its caller's call, so callers see one call with one outcome. The
Spot closes here with ``RELOCATION_OUT`` and leaves the record alone, and what reaches this
host for it later is relayed for the follow window (routing/follow.py, RELOC-49).

A move that completes logs its ``MoveTimes`` at DEBUG, as the one argument of the record (only
when DEBUG is on for this logger): bench/relocation.py reads it; nothing else depends on it.
"""

from __future__ import annotations

import logging
import math

import attrs
import cbor2
import trio

from zlink_trio._runtime.declarations.system import (
    RelocateAbort,
    RelocateAnswer,
    RelocateChunk,
    RelocateCommit,
    RelocateIn,
)
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.forward import forward
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.sealing import SealedSpot, seal
from zlink_trio._runtime.spots.transfer import payload_chunks, timer_state_to_wire
from zlink_trio.errors import ZLinkError
from zlink_trio.options import RelocationReason

__all__ = ["MoveTimes", "move_spot"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


@attrs.frozen
class MoveTimes:
    """When one completed move passed each step, on Trio's clock of the source (seconds)."""

    spot_id: str
    payload_bytes: int
    sealing: float
    """The seal began: from here on what reaches the Spot is held."""
    sealed: float
    """The running turn had ended."""
    prepared: float
    """The target had restored the unit (its last answer before the commit)."""
    committed: float
    """The record named the target."""
    opened: float
    """The target had opened the unit and serves it."""


async def move_spot(
    remote: Remote, moved: Moved, activation: Activation, target: NodeRecord, deadline: float
) -> RelocationReason | None:
    """Move ``activation`` to ``target`` before ``deadline`` (Trio's clock); ``None`` once the
    target owns it, else why it stayed here (Rules 1-3)."""
    node = activation.node
    with trio.move_on_at(deadline):
        await activation.settled.wait()  # a Spot still activating is moved once it is Ready
    sealing = trio.current_time()
    try:
        sealed = await seal(activation)
    except ZLinkError as error:
        _log.info("%s cannot be moved now: %s", activation.spot_id, error)
        return RelocationReason.STATE_INCOMPATIBLE
    sealed_at = prepared = committed = trio.current_time()
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
            prepared = trio.current_time()
            node.fence.check()
            handed = await node.authority.hand_over(sealed.claim, target.rid, target.generation)
            committed = trio.current_time()
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
    opened = await _hand_over(remote, sealed, activation, target, handed.version, snapshot.entries)
    if _log.isEnabledFor(logging.DEBUG):
        size = 0 if payload is None else len(payload)
        times = MoveTimes(spot_id.value, size, sealing, sealed_at, prepared, committed, opened)
        _log.debug("%s", times)
    return None


async def _hand_over(
    remote: Remote,
    sealed: SealedSpot,
    activation: Activation,
    target: NodeRecord,
    version: int,
    captured: tuple[Envelope, ...],
) -> float:
    """Rule 3: open the unit on the target, relay what stayed here, close here; when the
    target answered that it serves the unit."""
    node = activation.node
    try:
        answer = await remote.request(
            Owner(target.rid),
            activation.spot_id,
            RelocateCommit(version),
            RelocateAnswer,
            {},
            None,
            node.clock.now() + node.config.request_timeout,
        )
        if isinstance(answer, RelocateAnswer) and not answer.ok:
            _log.error(
                "%s did not open %s after its commit: %s",
                target.rid,
                activation.spot_id,
                answer.why,
            )
    except ZLinkError as error:
        # The record names the target: it owns the unit whether or not it heard (Rule 3).
        _log.error("telling %s to open %s failed: %s", target.rid, activation.spot_id, error)
    opened = trio.current_time()
    send, receive = trio.open_memory_channel[Envelope](math.inf)
    sealed.detach(send.send_nowait)

    async def relay() -> None:
        await forward(remote, activation, target.rid, list(captured), permits_held=False)
        async with receive:
            async for envelope in receive:
                await forward(remote, activation, target.rid, [envelope], permits_held=False)

    async with trio.open_nursery() as relaying:
        relaying.start_soon(relay)
        await activation.closed.wait()
        send.close()
    return opened
