"""Node membership through the Location Store (specs/mesh.md, MESH-1..MESH-17).

Key layout, under the mesh's prefix like the authority records:

    m/<mesh>/node/<node rid>    the node record of the run that holds the RID (CBOR map):
                                rid, generation, application and completion endpoints, state
                                ("serving" | "draining"), stable Spot type names, load

Rule 1: the lease is the record's retention. Every write of the own record is a ``Put`` with
``retention=lease``, so a run that stops renewing (killed, partitioned) drops out ``lease``
after its last write on the database clock, without anyone deleting it (MESH-3, MESH-6).
Rule 2: one run per RID. The own record is written only with ``IfMissing`` or ``IfVersion`` on
the version this run holds, so a run never overwrites or deletes a record of another generation;
a start that finds the RID held waits for that lease to lapse, and gives up with
``ALREADY_EXISTS`` once the holder proves alive by renewing (MESH-8, MESH-10).
Rule 3: the store is the truth, notifications are hints. Peers are re-read on every change
hint, on every poll and when an observed lease runs out; a store that cannot be read leaves the
last observation standing, it never makes peers up or down (MESH-4, MESH-11).
Rule 4: an unknown outcome is settled by reading. A write that raised or was cancelled may have
committed; the next conflict reads the record and adopts it when it names this run (DEC-17).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

import attrs
import cbor2
import trio

from zlink_trio._exception_groups import sole_error
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Changed,
    ChangeSubscription,
    Conflict,
    Delete,
    Expired,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Put,
    Record,
    Resync,
    ScanPage,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, StableTypeName

__all__ = [
    "DRAINING",
    "Membership",
    "MembershipStore",
    "NodeRecord",
    "PeerChanged",
    "PeerDown",
    "PeerEvent",
    "PeerUp",
    "SERVING",
]

_log = logging.getLogger("zlink_trio.runtime.membership")

SERVING = "serving"
"""The node takes new placements."""
DRAINING = "draining"
"""The node is leaving: it keeps serving what it has but takes no new placements."""
STATES = frozenset({SERVING, DRAINING})

MAX_LOAD = 2**63 - 1
MAX_QUEUED_EVENTS = 10_000
"""A subscriber this many events behind is dropped: its channel ends (MESH-13)."""
WITHDRAW_TIMEOUT = 2.0
"""Seconds the shielded delete of the own record may take when the run ends (MESH-5)."""
_EXPIRY_MARGIN = 0.05
"""Seconds past an observed expiry before re-reading, so the database sees it lapsed."""
_PAGE_LIMIT = 500
_SCAN_ATTEMPTS = 3
_WRITE_ROUNDS = 8
_FIELDS = frozenset({"rid", "generation", "application", "completion", "state", "types", "load"})


# --- the node record ---------------------------------------------------------------------------


def _type_names(value: Iterable[Any]) -> tuple[StableTypeName, ...]:
    if isinstance(value, str | bytes):
        raise TypeError("types takes an iterable of StableTypeName, not a single string")
    return tuple(value)


def _check_types(_instance: object, _attribute: object, value: tuple[Any, ...]) -> None:
    for item in value:
        if not isinstance(item, StableTypeName):
            raise TypeError(f"types holds StableTypeName values, not {type(item).__name__}")
    if len(set(value)) != len(value):
        raise ValueError("types names the same stable type twice")


def _check_state(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not str:
        raise TypeError(f"state must be a str, not {type(value).__name__}")
    if value not in STATES:
        raise ValueError(f"state must be {SERVING!r} or {DRAINING!r}, got {value!r}")


def _check_load(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not int:
        raise TypeError(f"load must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_LOAD:
        raise ValueError(f"load must be in 0..{MAX_LOAD}, got {value}")


def _check_endpoint(_instance: object, attribute: attrs.Attribute[str], value: Any) -> None:
    if type(value) is not str:
        raise TypeError(f"{attribute.name} must be a str, not {type(value).__name__}")


@attrs.frozen
class NodeRecord:
    """What a node run publishes about itself (MESH-1)."""

    rid: NodeRid = attrs.field(validator=attrs.validators.instance_of(NodeRid))
    generation: NodeGeneration = attrs.field(validator=attrs.validators.instance_of(NodeGeneration))
    application_endpoint: str = attrs.field(default="", validator=_check_endpoint)
    """Where peers connect for the application connection; empty before the transport binds."""
    completion_endpoint: str = attrs.field(default="", validator=_check_endpoint)
    """Where peers connect for the completion connection; empty before the transport binds."""
    state: str = attrs.field(default=SERVING, validator=_check_state)
    types: tuple[StableTypeName, ...] = attrs.field(
        default=(), converter=_type_names, validator=_check_types
    )
    """The stable Spot type names this node can host (placement input)."""
    load: int = attrs.field(default=0, validator=_check_load)
    """How many activations the node holds, as of its last write."""

    def encode(self) -> bytes:
        """The CBOR bytes stored at the node's key."""
        return cbor2.dumps(
            {
                "rid": self.rid.value,
                "generation": self.generation.value,
                "application": self.application_endpoint,
                "completion": self.completion_endpoint,
                "state": self.state,
                "types": [name.value for name in self.types],
                "load": self.load,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> NodeRecord:
        """Read what :meth:`encode` wrote; ``ValueError`` naming the fault for anything else.

        Keys beyond the known ones are ignored, so a later version may add fields (MESH-2).
        """
        if type(raw) is not bytes:
            raise TypeError(f"a node record is bytes, not {type(raw).__name__}")
        try:
            data = cbor2.loads(raw)
        except Exception as error:  # cbor2 raises several unrelated types for bad input
            raise ValueError(f"a node record is not valid CBOR: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"a node record is a CBOR map, not {type(data).__name__}")
        missing = sorted(_FIELDS - data.keys())
        if missing:
            raise ValueError(f"a node record lacks the fields {missing}")
        types = data["types"]
        if not isinstance(types, list):
            raise ValueError(f"a node record's types is a list, not {type(types).__name__}")
        try:
            return cls(
                NodeRid(data["rid"]),
                NodeGeneration(data["generation"]),
                data["application"],
                data["completion"],
                data["state"],
                tuple(StableTypeName(name) for name in types),
                data["load"],
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"a node record holds a bad field: {error}") from None


# --- what subscribers are told -----------------------------------------------------------------


@attrs.frozen
class PeerUp:
    """A run of a peer is live: connect to it."""

    record: NodeRecord


@attrs.frozen
class PeerChanged:
    """A live run's record changed (state, endpoints, types or load); its generation did not."""

    record: NodeRecord


@attrs.frozen
class PeerDown:
    """A run of a peer is no longer live: its record was deleted, lapsed or replaced."""

    rid: NodeRid
    generation: NodeGeneration


PeerEvent = PeerUp | PeerChanged | PeerDown


class MembershipStore(Protocol):
    """The part of the Location Store that membership uses (``LocationStore`` has it)."""

    async def read(self, key: str) -> Missing | Found: ...

    async def write(self, batch: Batch) -> Applied | Conflict: ...

    async def scan(
        self, prefix: str, limit: int, cursor: str | None = None
    ) -> ScanPage | Expired: ...

    def changes(self) -> ChangeSubscription: ...


@attrs.frozen
class _Seen:
    """One peer as last observed: its record, version and local lease deadline."""

    record: NodeRecord
    version: int
    deadline: float | None
    """``trio.current_time()`` by which the observed lease has run out; ``None`` if durable."""


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value}")
    return float(value)


_NEW, _RUNNING, _ENDED = "new", "running", "ended"


class Membership:
    """This node run's record in one mesh, and the live records of its peers.

    ``run()`` publishes the record, renews it every ``renew_every`` seconds under a lease of
    ``lease`` seconds, watches the peers and withdraws the record when it ends. A membership
    runs once; a restarted node makes a new one with a new generation.
    """

    def __init__(
        self,
        store: MembershipStore,
        mesh: MeshName,
        record: NodeRecord,
        *,
        lease: float = 10.0,
        renew_every: float | None = None,
        poll_every: float | None = None,
    ) -> None:
        if not isinstance(mesh, MeshName):
            raise TypeError(f"mesh must be a MeshName, not {type(mesh).__name__}")
        if not isinstance(record, NodeRecord):
            raise TypeError(f"record must be a NodeRecord, not {type(record).__name__}")
        self._lease = _seconds("lease", lease)
        self._retention = timedelta(seconds=self._lease)
        if self._retention <= timedelta(0):
            raise ValueError(f"lease must be at least a microsecond, got {lease}")
        self._renew_every = (
            self._lease / 3 if renew_every is None else _seconds("renew_every", renew_every)
        )
        if self._renew_every >= self._lease:
            raise ValueError(
                f"renew_every ({self._renew_every}) must be shorter than the lease ({self._lease})"
            )
        self._poll_every = (
            self._lease / 2 if poll_every is None else _seconds("poll_every", poll_every)
        )
        self._store = store
        self._mesh = mesh
        self._prefix = f"m/{mesh.value}/node/"
        self._key = self._prefix + record.rid.value
        self._record = record
        self._version: int | None = None
        self._attempted = False
        self._phase = _NEW
        self._peers: dict[NodeRid, _Seen] = {}
        self._reported_bad: dict[str, int] = {}
        self._subscribers: list[trio.MemorySendChannel[PeerEvent]] = []
        self._touched = trio.Event()
        self._prompt = trio.Event()

    # --- what callers read ---------------------------------------------------------------------

    @property
    def rid(self) -> NodeRid:
        return self._record.rid

    @property
    def generation(self) -> NodeGeneration:
        return self._record.generation

    @property
    def record(self) -> NodeRecord:
        """The record the next write publishes (updates included)."""
        return self._record

    def peers(self) -> Mapping[NodeRid, NodeRecord]:
        """The live peers as last observed, this node excluded; a snapshot, not a view."""
        return {rid: seen.record for rid, seen in self._peers.items()}

    async def wait_for_peer(
        self, rid: NodeRid, generation: NodeGeneration | None = None
    ) -> NodeRecord:
        """Wait until ``rid`` (of ``generation``, if given) is a live peer and return its record.

        Raises ``ZLinkError(SHUTTING_DOWN)`` once the membership has ended.
        """
        if not isinstance(rid, NodeRid):
            raise TypeError(f"rid must be a NodeRid, not {type(rid).__name__}")
        if generation is not None and not isinstance(generation, NodeGeneration):
            raise TypeError(f"generation must be a NodeGeneration, not {type(generation).__name__}")
        while True:
            seen = self._peers.get(rid)
            if seen is not None and generation in (None, seen.record.generation):
                return seen.record
            if self._phase == _ENDED:
                raise ZLinkError(ErrorKind.SHUTTING_DOWN, f"the membership of {self.rid} ended")
            await self._touched.wait()

    def subscribe(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A channel of peer events: first ``PeerUp`` for every live peer known now, then each
        change as it is observed. It ends when the membership ends, or when the subscriber falls
        ``MAX_QUEUED_EVENTS`` behind (subscribe again for a fresh snapshot)."""
        send, receive = trio.open_memory_channel[PeerEvent](MAX_QUEUED_EVENTS)
        if self._phase == _ENDED:
            send.close()
            return receive
        self._subscribers.append(send)
        for rid in sorted(self._peers, key=lambda item: item.value):
            self._send(send, PeerUp(self._peers[rid].record))
        return receive

    async def is_live(self, rid: NodeRid, generation: NodeGeneration) -> bool:
        """Whether the store holds a live record of exactly this run, read now (not the cache).

        A store failure raises ``ZLinkError(UNAVAILABLE)``: unknown is not dead (MESH-12).
        """
        if not isinstance(rid, NodeRid):
            raise TypeError(f"rid must be a NodeRid, not {type(rid).__name__}")
        if not isinstance(generation, NodeGeneration):
            raise TypeError(f"generation must be a NodeGeneration, not {type(generation).__name__}")
        found = await self._store.read(self._prefix + rid.value)
        if not isinstance(found, Found):
            return False
        record = _decode_or_none(found.value)
        return record is not None and record.rid == rid and record.generation == generation

    # --- what the host changes -----------------------------------------------------------------

    def update(
        self,
        *,
        load: int | None = None,
        state: str | None = None,
        application_endpoint: str | None = None,
        completion_endpoint: str | None = None,
    ) -> None:
        """Change what this node publishes. A new load goes out with the next renewal; any other
        change is written at once (MESH-14). ``None`` leaves a field as it is."""
        changes: dict[str, Any] = {
            name: value
            for name, value in (
                ("load", load),
                ("state", state),
                ("application_endpoint", application_endpoint),
                ("completion_endpoint", completion_endpoint),
            )
            if value is not None
        }
        updated = attrs.evolve(self._record, **changes)
        urgent = attrs.evolve(updated, load=self._record.load) != self._record
        self._record = updated
        if urgent:
            self._prompt.set()

    # --- the run -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish the record, report started, then renew and watch until cancelled.

        Raises ``ZLinkError(ALREADY_EXISTS)`` when another live run holds this RID (at start) or
        took it over (later), and ``ZLinkError(UNAVAILABLE)`` when the store cannot be reached
        to publish at start. On the way out the own record is deleted if it is still this run's.
        """
        if self._phase != _NEW:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, "a Membership runs only once")
        self._phase = _RUNNING
        try:
            with self._store.changes() as subscription:
                # Subscribed before the first scan, so nothing written after it is missed.
                await self._publish(first=True)
                try:
                    await self._refresh_all()
                except ZLinkError as error:
                    if error.kind != ErrorKind.UNAVAILABLE:
                        raise
                    _log.warning("could not read the peers of %s yet: %s", self.rid, error)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._renew_loop)
                        nursery.start_soon(self._watch_loop, subscription)
                        task_status.started()
                except BaseExceptionGroup as group:
                    lone = sole_error(group)
                    if lone is None:
                        raise
                    raise lone from None
        finally:
            self._end()
            with trio.move_on_after(WITHDRAW_TIMEOUT) as scope:
                scope.shield = True
                await self._withdraw()
            if scope.cancelled_caught:
                _log.warning(
                    "withdrawing the node record of %s timed out; it lapses with its lease",
                    self.rid,
                )

    # --- the own record ------------------------------------------------------------------------

    def _is_own(self, raw: bytes) -> bool:
        record = _decode_or_none(raw)
        return (
            record is not None and record.generation == self.generation and (record.rid == self.rid)
        )

    async def _publish(self, *, first: bool) -> None:
        """Write the own record under a fresh lease (Rule 2, Rule 4)."""
        key = self._key
        for _ in range(_WRITE_ROUNDS):
            record = self._record
            condition = IfMissing(key) if self._version is None else IfVersion(key, self._version)
            self._attempted = True
            written = await self._store.write(
                Batch([condition], [Put(key, record.encode(), self._retention)])
            )
            if isinstance(written, Applied):
                self._version = written.versions[0]
                return
            found = await self._store.read(key)
            if isinstance(found, Missing):
                if self._version is not None:
                    _log.warning(
                        "the node record of %s in mesh %s lapsed or was deleted; publishing it "
                        "again",
                        self.rid,
                        self._mesh,
                    )
                self._version = None
                continue
            if self._is_own(found.value):
                # A write whose outcome was unknown did commit: carry on from its version.
                self._version = found.version
                continue
            self._version = None
            if not first:
                raise ZLinkError(
                    ErrorKind.ALREADY_EXISTS,
                    f"node {self.rid} in mesh {self._mesh} was taken over by "
                    f"{_describe(found.value)}; this run ({self.generation!r}) stops",
                )
            await self._wait_for_lapse(found)
        raise ZLinkError(
            ErrorKind.UNAVAILABLE, f"the node record of {self.rid} kept changing while written"
        )

    async def _wait_for_lapse(self, found: Found) -> None:
        """Return once the foreign record at the own key has lapsed; ``ALREADY_EXISTS`` as soon
        as its holder renews it, or at once if it never expires (MESH-8)."""
        holder = _describe(found.value)
        if found.expires_at is None:
            raise ZLinkError(
                ErrorKind.ALREADY_EXISTS,
                f"node {self.rid} in mesh {self._mesh} is held by {holder} without a lease",
            )
        _log.info(
            "node %s in mesh %s is held by %s; waiting for its lease to lapse",
            self.rid,
            self._mesh,
            holder,
        )
        seen = found
        expires_at: datetime = found.expires_at
        while True:
            remaining = (expires_at - seen.store_now).total_seconds() + _EXPIRY_MARGIN
            await trio.sleep(max(0.0, min(remaining, self._renew_every)))
            now = await self._store.read(self._key)
            if isinstance(now, Missing):
                return
            if now.version != seen.version or now.expires_at is None:
                raise ZLinkError(
                    ErrorKind.ALREADY_EXISTS,
                    f"node {self.rid} in mesh {self._mesh} is held by {_describe(now.value)}, "
                    "which renewed its lease",
                )
            seen = now
            expires_at = now.expires_at

    async def _renew_loop(self) -> None:
        while True:
            with trio.move_on_after(self._renew_every):
                await self._prompt.wait()
            self._prompt = trio.Event()
            try:
                await self._publish(first=False)
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE:
                    raise
                _log.warning(
                    "could not renew the node record of %s in mesh %s; trying again: %s",
                    self.rid,
                    self._mesh,
                    error,
                )

    async def _withdraw(self) -> None:
        """Delete the own record if it is still this run's (Rule 2)."""
        if not self._attempted:
            return
        key = self._key
        try:
            if self._version is not None:
                deleted = await self._store.write(
                    Batch([IfVersion(key, self._version)], [Delete(key)])
                )
                if isinstance(deleted, Applied):
                    return
            found = await self._store.read(key)
            if isinstance(found, Found) and self._is_own(found.value):
                await self._store.write(Batch([IfVersion(key, found.version)], [Delete(key)]))
        except ZLinkError as error:
            _log.warning(
                "could not withdraw the node record of %s; it lapses with its lease: %s",
                self.rid,
                error,
            )

    # --- the peers -----------------------------------------------------------------------------

    async def _watch_loop(self, subscription: ChangeSubscription) -> None:
        next_poll = trio.current_time() + self._poll_every
        healthy = True
        while True:
            wake = min(next_poll, self._earliest_deadline()) if healthy else next_poll
            event: Changed | Resync | None = None
            with trio.move_on_at(wake):
                event = await subscription.__anext__()
            try:
                if isinstance(event, Changed):
                    keys = sorted(key for key in event.keys if key.startswith(self._prefix))
                    for key in keys:
                        await self._refresh_key(key)
                else:
                    # A poll, a lease that ran out, or a hint that changes were missed.
                    await self._refresh_all()
                    next_poll = trio.current_time() + self._poll_every
                    healthy = True
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE:
                    raise
                _log.warning("could not read the peers of %s; trying again: %s", self.rid, error)
                next_poll = trio.current_time() + self._poll_every
                healthy = False

    def _earliest_deadline(self) -> float:
        deadlines = [seen.deadline for seen in self._peers.values() if seen.deadline is not None]
        return min(deadlines, default=math.inf) + _EXPIRY_MARGIN

    async def _scan(self) -> tuple[list[Record], datetime]:
        for _ in range(_SCAN_ATTEMPTS):
            records: list[Record] = []
            cursor: str | None = None
            while True:
                page = await self._store.scan(self._prefix, _PAGE_LIMIT, cursor)
                if isinstance(page, Expired):
                    break
                records.extend(page.records)
                if page.cursor is None:
                    return records, page.store_now
                cursor = page.cursor
        raise ZLinkError(ErrorKind.UNAVAILABLE, "the node records could not be scanned")

    async def _refresh_all(self) -> None:
        records, store_now = await self._scan()
        observed_at = trio.current_time()
        fresh: dict[NodeRid, _Seen] = {}
        for item in records:
            deadline = _deadline(observed_at, item.expires_at, store_now)
            seen = self._interpret(item.key, item.value, item.version, deadline)
            if seen is not None:
                fresh[seen.record.rid] = seen
        present = {item.key for item in records}
        self._reported_bad = {k: v for k, v in self._reported_bad.items() if k in present}
        for rid in sorted(set(self._peers) | set(fresh), key=lambda item: item.value):
            self._apply(rid, fresh.get(rid))

    async def _refresh_key(self, key: str) -> None:
        if key == self._key:
            return
        try:
            rid = NodeRid(key[len(self._prefix) :])
        except (TypeError, ValueError):
            return  # no RID can sit under this key, so no peer is cached under it
        found = await self._store.read(key)
        if isinstance(found, Missing):
            self._reported_bad.pop(key, None)
            self._apply(rid, None)
            return
        deadline = _deadline(trio.current_time(), found.expires_at, found.store_now)
        self._apply(rid, self._interpret(key, found.value, found.version, deadline))

    def _interpret(
        self, key: str, raw: bytes, version: int, deadline: float | None
    ) -> _Seen | None:
        """The peer a stored record describes, or ``None`` for the own key and for records that
        do not decode or name another RID than their key (logged once per version, MESH-15)."""
        if key == self._key:
            return None
        try:
            record = NodeRecord.decode(raw)
        except ValueError as error:
            self._report_bad(key, version, str(error))
            return None
        if record.rid.value != key[len(self._prefix) :]:
            self._report_bad(key, version, f"it names node {record.rid}")
            return None
        self._reported_bad.pop(key, None)
        return _Seen(record, version, deadline)

    def _report_bad(self, key: str, version: int, why: str) -> None:
        if self._reported_bad.get(key) != version:
            self._reported_bad[key] = version
            _log.warning("skipping the node record at %r (version %d): %s", key, version, why)

    def _apply(self, rid: NodeRid, seen: _Seen | None) -> None:
        """Replace the cached observation of ``rid`` and tell subscribers what changed."""
        old = self._peers.get(rid)
        if seen is None:
            if old is not None:
                del self._peers[rid]
                self._emit(PeerDown(rid, old.record.generation))
                self._touch()
            return
        self._peers[rid] = seen
        if old is None:
            self._emit(PeerUp(seen.record))
        elif old.record.generation != seen.record.generation:
            # Another run of the same RID: never merged with the one it replaced (MESH-7).
            self._emit(PeerDown(rid, old.record.generation))
            self._emit(PeerUp(seen.record))
        elif old.record != seen.record:
            self._emit(PeerChanged(seen.record))
        else:
            return
        self._touch()

    def _touch(self) -> None:
        self._touched.set()
        self._touched = trio.Event()

    def _emit(self, event: PeerEvent) -> None:
        for send in list(self._subscribers):
            self._send(send, event)

    def _send(self, send: trio.MemorySendChannel[PeerEvent], event: PeerEvent) -> None:
        try:
            send.send_nowait(event)
        except trio.WouldBlock:
            _log.warning(
                "a membership subscriber fell %d events behind; dropped", MAX_QUEUED_EVENTS
            )
            send.close()
            self._subscribers.remove(send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._subscribers.remove(send)

    def _end(self) -> None:
        self._phase = _ENDED
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()
        self._peers.clear()
        self._touch()


def _deadline(observed_at: float, expires_at: datetime | None, store_now: datetime) -> float | None:
    # Measured from after the answer arrived, so the local deadline falls after the real expiry.
    if expires_at is None:
        return None
    return observed_at + (expires_at - store_now).total_seconds()


def _decode_or_none(raw: bytes) -> NodeRecord | None:
    try:
        return NodeRecord.decode(raw)
    except ValueError:
        return None


def _describe(raw: bytes) -> str:
    record = _decode_or_none(raw)
    if record is None:
        return "an unreadable record"
    return f"run {record.generation!r}"
