"""The own node record under a lease: publish, renew, withdraw (specs/mesh.md MESH-3, MESH-5,
MESH-8, MESH-9, MESH-10, MESH-11, MESH-14).

``NodeLease`` writes this run's record at ``m/<mesh>/node/<rid>`` (``node_record``) and keeps it
there while the run lives; ``Membership`` (``membership``) composes it with the watch over the
peers (``peer_watch``).

Rule 1: the record is durable; silence ends it. The own record is written without a retention
and renewed every ``renew_every`` seconds; a run that stops renewing (killed, paused,
partitioned) is removed by a peer that saw the record unchanged for ``lease + margin`` on the
database clock (``peer_watch`` Rule 2), never by the clock alone, so an outage of the store
does not end the runs behind it (MESH-3, MESH-6, MESH-20).
Rule 2: one run per RID. The own record is written only with ``IfMissing`` (the first write) or
``IfVersion`` on the version this run holds, so a run never overwrites or deletes a record of
another generation; a start that finds the RID held waits until it has seen that record
unchanged for ``lease + margin`` and then deletes it on that version, and gives up with
``ALREADY_EXISTS`` once the holder proves alive by renewing (MESH-8, MESH-10).
Rule 3: an unknown outcome is settled by reading. A write that raised or was cancelled may have
committed; the next conflict reads the record and adopts it when it names this run (DEC-17).
Rule 4: a lease once lost stays lost. Each successful renewal moves the run's fence
(``fence.py``); a renewal that finds the record gone or another run's never writes it again:
the run is lost, the fence closes for good and ``renew_loop`` raises ``UNAVAILABLE``, which ends
the host's run (MESH-21, MESH-22).
Rule 5: a change can be awaited. ``published()`` returns once a successful write carried every
urgent change made before the call (a relocation starts moving only once its record says
RELOCATING, so that its first commit does not share the store with that write).
Rule 6: a renewal is quiet. The first write and every write that carries an urgent change
notify peers (they re-read the record at once); a renewal that only moves the version, or
carries a new load, does not: peers see it at their next poll, so a mesh's idle store work does
not grow with the square of its size (MESH-25).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import attrs
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    Found,
    IfMissing,
    IfVersion,
    LocationStore,
    Missing,
    Put,
)
from zlink_trio._runtime.ownership.fence import Fence, fence_margin
from zlink_trio._runtime.ownership.node_record import (
    EXPIRY_MARGIN,
    NodeRecord,
    decode_or_none,
    describe_holder,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName

__all__ = ["NodeLease"]

_log = logging.getLogger("zlink_trio.runtime.membership")

_WRITE_ROUNDS = 8


class NodeLease:
    """This run's record at ``key``, renewed every ``renew_every`` seconds while
    :meth:`renew_loop` runs; each renewal moves ``fence`` (Rule 4)."""

    def __init__(
        self,
        store: LocationStore,
        mesh: MeshName,
        key: str,
        record: NodeRecord,
        *,
        lease: float,
        renew_every: float,
        fence: Fence,
    ) -> None:
        self._store = store
        self._mesh = mesh
        self._key = key
        self._record = record
        self._silence = timedelta(seconds=lease + fence_margin(lease))
        self._renew_every = renew_every
        self._fence = fence
        self._version: int | None = None
        self._attempted = False
        self._prompt = trio.Event()
        self._revision = 0
        """How often ``revise`` changed what this run publishes."""
        self._landed_revision = -1
        """The revision that the last successful write carried."""
        self._landed = trio.Event()
        """Set, and replaced, at each successful write."""
        self._load: Callable[[], int] | None = None
        """Where each write reads the load it publishes (``load_from``), if anywhere."""

    @property
    def record(self) -> NodeRecord:
        """The record the next write publishes (updates included)."""
        return self._record

    def revise(self, changes: Mapping[str, Any]) -> None:
        """Apply ``changes`` (field name to value) to the record. A new load goes out with the
        next renewal; any other change prompts a write at once (MESH-14)."""
        updated = attrs.evolve(self._record, **changes)
        urgent = attrs.evolve(updated, load=self._record.load) != self._record
        self._record = updated
        if urgent:
            self._revision += 1
            self._prompt.set()

    def load_from(self, source: Callable[[], int]) -> None:
        """Read the load from ``source`` at each write (a load alone is not urgent: Rule 6)."""
        self._load = source

    async def published(self) -> None:
        """Return once a write carried every urgent change revised so far (Rule 5)."""
        wanted = self._revision
        while self._landed_revision < wanted:
            await self._landed.wait()

    def _is_own(self, raw: bytes) -> bool:
        record = decode_or_none(raw)
        return (
            record is not None
            and record.generation == self._record.generation
            and (record.rid == self._record.rid)
        )

    async def publish(self, *, first: bool) -> None:
        """Write the own record (Rule 2, Rule 3); a success moves the fence (Rule 4)."""
        key = self._key
        for _ in range(_WRITE_ROUNDS):
            if self._load is not None:
                self.revise({"load": self._load()})
            record, revision = self._record, self._revision
            condition = IfMissing(key) if self._version is None else IfVersion(key, self._version)
            # A renewal that carries no urgent change is quiet (Rule 6).
            notify = self._version is None or revision != self._landed_revision
            self._attempted = True
            started = trio.current_time()
            batch = Batch([condition], [Put(key, record.encode())], notify=notify)
            written = await self._store.write(batch)
            if isinstance(written, Applied):
                self._version = written.versions[0]
                self._fence.renewed(started)
                self._landed_revision = revision
                self._landed.set()
                self._landed = trio.Event()
                if record is self._record:
                    # What prompted a write is in this one: no second write follows at once.
                    self._prompt = trio.Event()
                return
            found = await self._store.read(key)
            if isinstance(found, Found) and self._is_own(found.value):
                # A write whose outcome was unknown did commit: carry on from its version.
                self._version = found.version
                continue
            if self._version is not None or not first:
                self._lose(found)
            if isinstance(found, Missing):
                continue
            await self._wait_for_silence(found)
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"the node record of {self._record.rid} kept changing while written",
        )

    def _lose(self, found: Missing | Found) -> None:
        """The own record is gone or another run's: this run is over (Rule 4)."""
        rid, mesh = self._record.rid, self._mesh
        if isinstance(found, Missing):
            why = (
                f"the node record of {rid} in mesh {mesh} was removed: its peers saw no renewal "
                "for longer than the lease"
            )
        else:
            why = f"node {rid} in mesh {mesh} was taken over by {describe_holder(found.value)}"
        self._fence.lose(why)
        _log.error("%s; this run (%r) stops serving and ends", why, self._record.generation)
        generation = self._record.generation
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"{why}; this run ({generation!r}) ended")

    async def _wait_for_silence(self, found: Found) -> None:
        """Return once the foreign record at the own key was unchanged for ``lease + margin``
        on the database clock and is deleted on that version; ``ALREADY_EXISTS`` as soon as its
        holder renews it (MESH-8). A failed read starts the wait over."""
        rid = self._record.rid
        _log.info(
            "node %s in mesh %s is held by %s; waiting to see whether it renews",
            rid,
            self._mesh,
            describe_holder(found.value),
        )
        seen: Found | None = found
        since = found.store_now
        while True:
            if seen is None:
                wait = self._renew_every
            else:
                remaining = (since + self._silence - seen.store_now).total_seconds()
                wait = max(0.0, min(remaining + EXPIRY_MARGIN, self._renew_every))
            await trio.sleep(wait)
            try:
                now = await self._store.read(self._key)
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE:
                    raise
                seen = None
                continue
            if isinstance(now, Missing):
                return
            if seen is None:
                seen, since = now, now.store_now  # after a gap the silence counts again
                continue
            if now.version != seen.version:
                raise ZLinkError(
                    ErrorKind.ALREADY_EXISTS,
                    f"node {rid} in mesh {self._mesh} is held by {describe_holder(now.value)}, "
                    "which renewed its record",
                )
            seen = now
            if now.store_now - since >= self._silence:
                await self._store.write(
                    Batch([IfVersion(self._key, now.version)], [Delete(self._key)])
                )
                return

    async def renew_loop(self) -> None:
        """Rewrite the record every ``renew_every`` seconds, or at once when prompted; an
        ``UNAVAILABLE`` store is logged and tried again sooner, while the fence holds or not
        (MESH-11). Raises ``UNAVAILABLE`` once the lease is lost (Rule 4)."""
        retry = self._renew_every
        while True:
            with trio.move_on_after(retry):
                await self._prompt.wait()
            self._prompt = trio.Event()
            try:
                await self.publish(first=False)
                retry = self._renew_every
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE or self._fence.lost is not None:
                    raise
                retry = min(self._renew_every, self._silence.total_seconds() / 20)
                _log.warning(
                    "could not renew the node record of %s in mesh %s; trying again: %s",
                    self._record.rid,
                    self._mesh,
                    error,
                )

    async def withdraw(self) -> None:
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
                "could not withdraw the node record of %s; peers remove it after its silence: %s",
                self._record.rid,
                error,
            )
