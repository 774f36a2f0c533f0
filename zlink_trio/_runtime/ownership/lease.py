"""The own node record under a lease: publish, renew, withdraw (specs/mesh.md MESH-3, MESH-5,
MESH-8, MESH-9, MESH-10, MESH-11, MESH-14).

``NodeLease`` writes this run's record at ``m/<mesh>/node/<rid>`` (``node_record``) and keeps it
there while the run lives; ``Membership`` (``membership``) composes it with the watch over the
peers (``peer_watch``).

Rule 1: the lease is the record's retention. Every write of the own record is a ``Put`` with
``retention=lease``, so a run that stops renewing (killed, partitioned) drops out ``lease``
after its last write on the database clock, without anyone deleting it (MESH-3, MESH-6).
Rule 2: one run per RID. The own record is written only with ``IfMissing`` or ``IfVersion`` on
the version this run holds, so a run never overwrites or deletes a record of another generation;
a start that finds the RID held waits for that lease to lapse, and gives up with
``ALREADY_EXISTS`` once the holder proves alive by renewing (MESH-8, MESH-10).
Rule 3: an unknown outcome is settled by reading. A write that raised or was cancelled may have
committed; the next conflict reads the record and adopts it when it names this run (DEC-17).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

import attrs
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Put,
)
from zlink_trio._runtime.ownership.node_record import (
    EXPIRY_MARGIN,
    NodeRecord,
    decode_or_none,
    describe_holder,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName

__all__ = ["LeaseStore", "NodeLease"]

_log = logging.getLogger("zlink_trio.runtime.membership")

_WRITE_ROUNDS = 8


class LeaseStore(Protocol):
    """The part of the Location Store that the lease uses (``LocationStore`` has it)."""

    async def read(self, key: str) -> Missing | Found: ...

    async def write(self, batch: Batch) -> Applied | Conflict: ...


class NodeLease:
    """This run's record at ``key``, written under a retention of ``retention`` and renewed
    every ``renew_every`` seconds while :meth:`renew_loop` runs."""

    def __init__(
        self,
        store: LeaseStore,
        mesh: MeshName,
        key: str,
        record: NodeRecord,
        *,
        retention: timedelta,
        renew_every: float,
    ) -> None:
        self._store = store
        self._mesh = mesh
        self._key = key
        self._record = record
        self._retention = retention
        self._renew_every = renew_every
        self._version: int | None = None
        self._attempted = False
        self._prompt = trio.Event()

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
            self._prompt.set()

    def _is_own(self, raw: bytes) -> bool:
        record = decode_or_none(raw)
        return (
            record is not None
            and record.generation == self._record.generation
            and (record.rid == self._record.rid)
        )

    async def publish(self, *, first: bool) -> None:
        """Write the own record under a fresh lease (Rule 2, Rule 3)."""
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
                        self._record.rid,
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
                    f"node {self._record.rid} in mesh {self._mesh} was taken over by "
                    f"{describe_holder(found.value)}; this run ({self._record.generation!r}) "
                    "stops",
                )
            await self._wait_for_lapse(found)
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"the node record of {self._record.rid} kept changing while written",
        )

    async def _wait_for_lapse(self, found: Found) -> None:
        """Return once the foreign record at the own key has lapsed; ``ALREADY_EXISTS`` as soon
        as its holder renews it, or at once if it never expires (MESH-8)."""
        rid = self._record.rid
        holder = describe_holder(found.value)
        if found.expires_at is None:
            raise ZLinkError(
                ErrorKind.ALREADY_EXISTS,
                f"node {rid} in mesh {self._mesh} is held by {holder} without a lease",
            )
        _log.info(
            "node %s in mesh %s is held by %s; waiting for its lease to lapse",
            rid,
            self._mesh,
            holder,
        )
        seen = found
        expires_at: datetime = found.expires_at
        while True:
            remaining = (expires_at - seen.store_now).total_seconds() + EXPIRY_MARGIN
            await trio.sleep(max(0.0, min(remaining, self._renew_every)))
            now = await self._store.read(self._key)
            if isinstance(now, Missing):
                return
            if now.version != seen.version or now.expires_at is None:
                raise ZLinkError(
                    ErrorKind.ALREADY_EXISTS,
                    f"node {rid} in mesh {self._mesh} is held by {describe_holder(now.value)}, "
                    "which renewed its lease",
                )
            seen = now
            expires_at = now.expires_at

    async def renew_loop(self) -> None:
        """Rewrite the record every ``renew_every`` seconds, or at once when prompted; an
        ``UNAVAILABLE`` store is logged and tried again (MESH-11)."""
        while True:
            with trio.move_on_after(self._renew_every):
                await self._prompt.wait()
            self._prompt = trio.Event()
            try:
                await self.publish(first=False)
            except ZLinkError as error:
                if error.kind != ErrorKind.UNAVAILABLE:
                    raise
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
                "could not withdraw the node record of %s; it lapses with its lease: %s",
                self._record.rid,
                error,
            )
