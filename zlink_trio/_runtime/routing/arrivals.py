"""The target's side of a Spot's move (specs/relocation.md RELOC-47..RELOC-50; the source's
side is host/moving.py).

Rule 1: a move arrives as the framework's requests from the source, in order on the source's
connection: ``zlink.RelocateIn`` (the unit and its timers), one ``zlink.RelocateChunk`` per
payload chunk when the type has an adapter, then ``zlink.RelocateCommit`` or
``zlink.RelocateAbort``. Each is answered with ``zlink.RelocateAnswer``.
Rule 2: the unit is restored before the commit and reachable only after it. Once every chunk is
in, a fresh instance is made and restored (spots/sealing.py ``prepare_restore``) and kept aside,
not in the catalog: nothing on this host can reach it while the store still names the source.
A restore that fails answers ``ok=False`` with the reason; the source then keeps the unit.
Rule 3: the commit admits it; the source's ``RelocateOpen`` lets it serve. ``RelocateCommit``
carries the version of the record that names this host now; the unit takes that claim and
joins the catalog, so what any host sends it from then on is admitted into its mailbox, but no
turn runs yet. What the source relays until its ``RelocateOpen`` (the messages it held, in the
order it admitted them) goes in front of that mailbox (``relayed``), so a sender that learned
the new owner early is not served ahead of what it sent before the move: per-sender order holds
(RELOC-60). ``RelocateOpen`` travels on the same connection after the relay, so it arrives after
the last relayed message; then the unit serves. A source that dies between its commit and its
``RelocateOpen`` leaves the unit to open by itself after ``request_timeout``.
Rule 4: an abort, a new ``RelocateIn`` for the same id, or this host's shutdown drops what was
prepared (its instance closes without a turn).
"""

from __future__ import annotations

import logging

import attrs
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
from zlink_trio._runtime.ownership.authority import READY, Claim, SpotRecord
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._runtime.spots.sealing import RestoredSpot, SpotSnapshot, prepare_restore
from zlink_trio._runtime.spots.transfer import PayloadAssembly, timer_state_from_wire
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, ObjectGeneration, SpotId, SpotKind, StableTypeName

__all__ = ["Arrivals"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


@attrs.define
class _Arriving:
    source: NodeRid
    snapshot: SpotSnapshot
    assembly: PayloadAssembly | None
    restored: RestoredSpot | None = None
    committed: bool = False
    opened: trio.Event = attrs.field(factory=trio.Event)


class Arrivals:
    """The units moving to this host, by id (Rules 1-4)."""

    def __init__(self, spots: SpotCatalog[Activation]) -> None:
        self._spots = spots
        self._node = spots.node
        self._arriving: dict[SpotId | ActorId, _Arriving] = {}

    @property
    def under_way(self) -> bool:
        """Whether any unit is moving here (the reader's cheap first check)."""
        return bool(self._arriving)

    async def on_request(self, source: NodeRid, target: object, message: object) -> RelocateAnswer:
        """Answer one of the move's requests from ``source`` for ``target`` (Rule 1)."""
        if not isinstance(target, SpotId):
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "a Spot's move names a Spot id")
        self._node.check_admitting()
        if isinstance(message, RelocateIn):
            return await self._begin(source, target, message)
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source:
            return RelocateAnswer(False, f"no move of {target} from {source} is under way here")
        if arriving.committed and not isinstance(message, RelocateOpen):
            return RelocateAnswer(False, f"{target} was committed here already")
        if isinstance(message, RelocateChunk):
            assert arriving.assembly is not None  # a type without an adapter sends no chunk
            arriving.assembly.add(message.index, message.count, message.data)
            if arriving.assembly.complete:
                return await self._restore(target, arriving, arriving.assembly.payload)
            return RelocateAnswer(True)
        if isinstance(message, RelocateCommit):
            return self._commit(target, arriving, message.version)
        if isinstance(message, RelocateOpen):
            return self.open(source, target)
        if isinstance(message, RelocateAbort):
            self.drop(target)
            return RelocateAnswer(True)
        raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"not a move's request: {message!r}")

    async def _begin(self, source: NodeRid, target: SpotId, message: RelocateIn) -> RelocateAnswer:
        self.drop(target)
        spot_type = self._node.registry.spot_types.get(StableTypeName(message.type_name))
        if spot_type is None or int(spot_type.kind) != message.kind:
            return RelocateAnswer(False, f"no {message.type_name} Spot type is served here")
        if target in self._spots.activations:
            return RelocateAnswer(False, f"{target} is live here already")
        now = self._node.clock.now()
        try:
            states = cbor2.loads(message.timers)
            if not isinstance(states, list):
                raise TypeError("timers are a list")
        except (ValueError, TypeError, cbor2.CBORDecodeError) as error:
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"a move's timers: {error}") from None
        snapshot = SpotSnapshot(
            target,
            spot_type.name,
            ObjectGeneration(message.generation),
            (),
            tuple(timer_state_from_wire(state, now) for state in states),
            now,
        )
        adapter = spot_type.relocation.adapter
        if (adapter is None) != (message.chunks == 0):
            return RelocateAnswer(False, f"{spot_type.name}'s payload does not match its policy")
        # Chunks are cut by the source's limit; here each is bounded as any message is.
        limit = self._node.config.max_message_bytes
        assembly = None if adapter is None else PayloadAssembly(limit)
        arriving = self._arriving[target] = _Arriving(source, snapshot, assembly)
        if assembly is None:
            return await self._restore(target, arriving, None)
        return RelocateAnswer(True)

    async def _restore(
        self, target: SpotId, arriving: _Arriving, payload: bytes | None
    ) -> RelocateAnswer:
        snapshot = arriving.snapshot
        spot_type = self._node.registry.spot_types[snapshot.type_name]
        # Until the commit the claim is the source's record as the source holds it; the commit
        # gives the version that names this host (Rule 3).
        record = SpotRecord(
            arriving.source,
            self._node.node_generation,
            snapshot.generation,
            SpotKind(spot_type.kind),
            spot_type.name,
            READY,
            self._node.mesh,
        )
        try:
            arriving.restored = await prepare_restore(
                self._spots, snapshot, Claim(target, record, 0), payload
            )
        except ZLinkError as error:
            self._arriving.pop(target, None)
            return RelocateAnswer(False, f"restoring {target} failed: {error}")
        return RelocateAnswer(True)

    def _commit(self, target: SpotId, arriving: _Arriving, version: int) -> RelocateAnswer:
        restored = arriving.restored
        if restored is None:
            return RelocateAnswer(False, f"{target} was not restored here")
        arriving.committed = True
        activation = restored.activation
        assert activation.claim is not None  # prepared with the source's record
        record = attrs.evolve(
            activation.claim.record,
            owner=self._node.node_rid,
            owner_generation=self._node.node_generation,
        )
        activation.claim = Claim(target, record, version)
        restored.admit()
        self._node.activation_nursery.start_soon(self._open_later, target, arriving)
        _log.info("%s moved here from %s", target, arriving.source)
        return RelocateAnswer(True)

    def relayed(self, source: NodeRid, target: SpotId | ActorId) -> RestoredSpot | None:
        """The committed unit that takes what ``source`` sends to ``target`` in front of its
        mailbox, until the source's ``RelocateOpen`` (Rule 3); else ``None``."""
        arriving = self._arriving.get(target)
        if arriving is None or not arriving.committed or arriving.source != source:
            return None
        return arriving.restored

    def open(self, source: NodeRid, target: SpotId | ActorId) -> RelocateAnswer:
        """``RelocateOpen`` from ``source``: the unit serves (Rule 3)."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source or not arriving.committed:
            return RelocateAnswer(False, f"no move of {target} from {source} awaits its opening")
        self._open(arriving)
        return RelocateAnswer(True)

    def _open(self, arriving: _Arriving) -> None:
        del self._arriving[arriving.snapshot.spot_id]
        assert arriving.restored is not None  # committed only once restored
        arriving.restored.open()
        arriving.opened.set()

    async def _open_later(self, target: SpotId, arriving: _Arriving) -> None:
        """Rule 3's last sentence: the source went quiet after its commit."""
        with trio.move_on_after(self._node.config.request_timeout):
            await arriving.opened.wait()
            return
        if self._arriving.get(target) is arriving:
            _log.warning("%s opens without its source %s's word", target, arriving.source)
            self._open(arriving)

    def drop(self, target: SpotId) -> None:
        """Rule 4: forget a prepared unit that will not open here."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.committed:
            return  # committed: the unit is this host's now
        del self._arriving[target]
        if arriving.restored is not None:
            arriving.restored.discard()
