"""Watching the peers' node records: scan, change hints, polling, lease expiry and the peer
events (specs/mesh.md MESH-4, MESH-6, MESH-7, MESH-11, MESH-13, MESH-15, MESH-17).

``PeerWatch`` keeps the live records under ``m/<mesh>/node/`` other than the own one
(``node_record``) and tells subscribers what changed; ``Membership`` (``membership``) composes
it with the own record's lease (``lease``).

Rule 1: the store is the truth, notifications are hints. Peers are re-read on every change
hint, on every poll and when an observed silence may have run out; a store that cannot be read
leaves the last observation standing, it never makes peers up or down (MESH-4, MESH-11).
Rule 2: a peer is dead once it was seen silent long enough, with the store in sight. A record
whose version stayed the same for ``silence`` (the lease plus its margin, ``fence.py``) on the
database clock is deleted by the watch, conditional on that version, and reported down; of
several watchers racing, one deletes and the others read it gone. The count starts over for
every peer when the watch itself lost sight of the store: a failed read, a ``Resync``, or two
successful reads further apart than ``gap`` (a long poll, a pause of this process). So an outage
of the store, or of this watcher, never counts as the peers' silence: after it, each peer gets a
whole ``silence`` to renew (MESH-6, MESH-20).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime, timedelta

import attrs
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Changed,
    ChangeSubscription,
    Delete,
    Expired,
    IfVersion,
    LocationStore,
    Missing,
    Record,
    Resync,
)
from zlink_trio._runtime.ownership.node_record import (
    EXPIRY_MARGIN,
    NodeRecord,
    PeerChanged,
    PeerDown,
    PeerEvent,
    PeerUp,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeGeneration, NodeRid

__all__ = ["MAX_QUEUED_EVENTS", "PeerWatch"]

_log = logging.getLogger("zlink_trio.runtime.membership")

MAX_QUEUED_EVENTS = 10_000
"""A subscriber this many events behind is dropped: its channel ends (MESH-13)."""
_PAGE_LIMIT = 500
_SCAN_ATTEMPTS = 3


@attrs.frozen
class _Seen:
    """One peer as last observed: its record and version, and since when it is silent."""

    record: NodeRecord
    version: int
    since: datetime
    """The database time from which this version's silence counts (Rule 2)."""
    deadline: float
    """``trio.current_time()`` by which the silence may have run out: look again then."""


class PeerWatch:
    """The live peers under ``prefix`` as last observed (the own ``own_key`` left out), and the
    subscribers told of each change, until :meth:`end`."""

    def __init__(
        self,
        store: LocationStore,
        prefix: str,
        own_key: str,
        rid: NodeRid,
        *,
        poll_every: float,
        silence: float,
    ) -> None:
        self._store = store
        self._silence = timedelta(seconds=silence)
        self._gap = timedelta(seconds=1.5 * poll_every)
        self._last_ok: datetime | None = None
        """The database time of the last successful read (Rule 2)."""
        self._prefix = prefix
        self._key = own_key
        self._rid = rid
        self._poll_every = poll_every
        self._ended = False
        self._peers: dict[NodeRid, _Seen] = {}
        self._reported_bad: dict[str, int] = {}
        self._subscribers: list[trio.MemorySendChannel[PeerEvent]] = []
        self._touched = trio.Event()

    # --- what callers read ---------------------------------------------------------------------

    def peers(self) -> Mapping[NodeRid, NodeRecord]:
        """The live peers as last observed; a snapshot, not a view."""
        return {rid: seen.record for rid, seen in self._peers.items()}

    async def wait_for_peer(self, rid: NodeRid, generation: NodeGeneration | None) -> NodeRecord:
        """Wait until ``rid`` (of ``generation``, if given) is a live peer and return its record;
        ``ZLinkError(SHUTTING_DOWN)`` once the watch has ended (MESH-17)."""
        while True:
            seen = self._peers.get(rid)
            if seen is not None and generation in (None, seen.record.generation):
                return seen.record
            if self._ended:
                raise ZLinkError(ErrorKind.SHUTTING_DOWN, f"the membership of {self._rid} ended")
            await self._touched.wait()

    def subscribe(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A channel that first holds ``PeerUp`` for every peer known now, then each change
        (MESH-13); already ended when the watch has."""
        send, receive = trio.open_memory_channel[PeerEvent](MAX_QUEUED_EVENTS)
        if self._ended:
            send.close()
            return receive
        self._subscribers.append(send)
        for rid in sorted(self._peers, key=lambda item: item.value):
            self._send(send, PeerUp(self._peers[rid].record))
        return receive

    # --- reading the store ---------------------------------------------------------------------

    async def watch_loop(self, subscription: ChangeSubscription) -> None:
        """Re-read the peers on every hint, poll and observed expiry (Rule 1), until cancelled."""
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
                    if isinstance(event, Resync):
                        self._last_ok = None  # changes were missed: silence counts again
                    # A poll, a silence that may have run out, or missed changes.
                    await self.refresh_all()
                    next_poll = trio.current_time() + self._poll_every
                    healthy = True
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE:
                    raise
                _log.warning("could not read the peers of %s; trying again: %s", self._rid, error)
                self._last_ok = None
                next_poll = trio.current_time() + self._poll_every
                healthy = False

    def _earliest_deadline(self) -> float:
        deadlines = [seen.deadline for seen in self._peers.values()]
        return min(deadlines, default=math.inf) + EXPIRY_MARGIN

    def _in_sight(self, store_now: datetime) -> None:
        """A read answered at ``store_now``: after a gap, every silence counts again (Rule 2)."""
        last, self._last_ok = self._last_ok, store_now
        if last is None or store_now - last > self._gap:
            for rid, seen in self._peers.items():
                deadline = trio.current_time() + self._silence.total_seconds()
                self._peers[rid] = attrs.evolve(seen, since=store_now, deadline=deadline)

    def _observe(
        self, key: str, raw: bytes, version: int, store_now: datetime, observed_at: float
    ) -> _Seen | None:
        """What a read of ``key`` says, with the silence carried over while the version is
        the same (Rule 2)."""
        fresh = self._interpret(key, raw, version)
        if fresh is None:
            return None
        old = self._peers.get(fresh.rid)
        since = store_now
        if old is not None and old.version == version:
            since = old.since
        left = (since + self._silence - store_now).total_seconds()
        return _Seen(fresh, version, since, observed_at + max(0.0, left))

    async def _end_silent(self, store_now: datetime) -> None:
        """Delete the record of every peer silent for ``silence``, on its version (Rule 2)."""
        for rid in sorted(self._peers, key=lambda item: item.value):
            seen = self._peers.get(rid)
            if seen is None or store_now - seen.since < self._silence:
                continue
            key = self._prefix + rid.value
            deleted = await self._store.write(Batch([IfVersion(key, seen.version)], [Delete(key)]))
            if isinstance(deleted, Applied):
                _log.warning(
                    "node %s (run %r) did not renew its record for %.1f s; removed it",
                    rid,
                    seen.record.generation,
                    self._silence.total_seconds(),
                )
                self._apply(rid, None)
            else:
                await self._refresh_key(key)

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

    async def refresh_all(self) -> None:
        """Scan every record under the prefix, apply what changed since the last look, and end
        the peers silent for too long (Rule 2)."""
        records, store_now = await self._scan()
        observed_at = trio.current_time()
        self._in_sight(store_now)
        fresh: dict[NodeRid, _Seen] = {}
        for item in records:
            seen = self._observe(item.key, item.value, item.version, store_now, observed_at)
            if seen is not None:
                fresh[seen.record.rid] = seen
        present = {item.key for item in records}
        self._reported_bad = {k: v for k, v in self._reported_bad.items() if k in present}
        for rid in sorted(set(self._peers) | set(fresh), key=lambda item: item.value):
            self._apply(rid, fresh.get(rid))
        await self._end_silent(store_now)

    async def _refresh_key(self, key: str) -> None:
        if key == self._key:
            return
        try:
            rid = NodeRid(key[len(self._prefix) :])
        except (TypeError, ValueError):
            return  # no RID can sit under this key, so no peer is cached under it
        found = await self._store.read(key)
        self._in_sight(found.store_now)
        if isinstance(found, Missing):
            self._reported_bad.pop(key, None)
            self._apply(rid, None)
            return
        observed_at = trio.current_time()
        self._apply(
            rid, self._observe(key, found.value, found.version, found.store_now, observed_at)
        )

    def _interpret(self, key: str, raw: bytes, version: int) -> NodeRecord | None:
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
        return record

    def _report_bad(self, key: str, version: int, why: str) -> None:
        if self._reported_bad.get(key) != version:
            self._reported_bad[key] = version
            _log.warning("skipping the node record at %r (version %d): %s", key, version, why)

    # --- telling what changed ------------------------------------------------------------------

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

    def end(self) -> None:
        """End every subscriber's channel and forget the peers (MESH-17)."""
        self._ended = True
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()
        self._peers.clear()
        self._touch()
