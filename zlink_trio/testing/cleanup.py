"""Removing finished test meshes from the shared store (specs/testing.md KIT-12).

Every example and every test host the kit names gets a mesh of its own (KIT-2); once its hosts
have closed, what they left in the store (the generation counters that outlive each Spot, the
records of a host that did not get to release them) is of no use to anyone, and the shared store
would otherwise grow with every example of every run.

Rule 1: only a finished mesh the kit named is cleared, and only by the process that ran it: its
name was never given out, and every host of it in this process has closed, so nothing can write
there any more.
Rule 2: clearing is a scan of ``m/<mesh>/`` and unconditional deletes in batches; a scan whose
snapshot expired is started again. It never fails the test: a store error is logged and the
records stay (they are harmless, only wasted space).
Rule 3: Actors are cleared too. Their keys carry no mesh (``actor/<id>``, and the counter
``actor-generation/<id>`` that lists every mesh that claimed the id): an Actor record that
names a finished mesh is deleted, a counter only finished meshes used is deleted, and one that
other meshes used too is rewritten without the finished ones (they rely on its generations),
as ``store retire`` does. Each change is conditional on the version read, so a claim racing the
clearing keeps its record and counter (that change is skipped); a counter of unknown meshes
stays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    Expired,
    LocationStore,
    Record,
)
from zlink_trio._runtime.ownership.records import Change, actor_leftovers
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import MeshName

__all__ = ["CLEAR_EVERY", "CLEAR_LIMIT", "clear_meshes"]

_log = logging.getLogger("zlink_trio.testing")

CLEAR_EVERY = 64
"""Finished meshes of one pool cleared together: one pause every so many tests or examples."""
CLEAR_LIMIT = 10.0
"""Seconds a clearing may take; what is left stays in the store."""
_PAGE = 500
_BATCH = 500
"""Keys deleted per batch (well under the store's limits of keys and bytes per batch)."""
_RESTARTS = 3
_AT_ONCE = 4
"""Meshes scanned at once (each scan holds one pool connection)."""


async def _records_of(location: LocationStore, prefix: str) -> list[Record]:
    for _ in range(_RESTARTS):
        records: list[Record] = []
        cursor: str | None = None
        while True:
            page = await location.scan(prefix, _PAGE, cursor)
            if isinstance(page, Expired):
                break
            records.extend(page.records)
            if page.cursor is None:
                return records
            cursor = page.cursor
    return []


async def _keys_of(location: LocationStore, prefix: str) -> list[str]:
    return [record.key for record in await _records_of(location, prefix)]


async def _actor_changes(location: LocationStore, finished: frozenset[MeshName]) -> list[Change]:
    """Rule 3: the Actor records and counters of the finished meshes, each on its version."""
    actors = actor_leftovers(
        await _records_of(location, "actor/"),
        await _records_of(location, "actor-generation/"),
        finished,
    )
    return [*actors.records, *actors.counters_deleted, *actors.counters_rewritten]


async def _write_changes(location: LocationStore, changes: list[Change]) -> None:
    """In batches; a batch that meets a changed record is written change by change, and the
    changes whose record changed are left out (Rule 3)."""
    for start in range(0, len(changes), _BATCH):
        chunk = changes[start : start + _BATCH]
        written = await location.write(Batch([c for c, _ in chunk], [m for _, m in chunk]))
        if not isinstance(written, Applied):
            for condition, mutation in chunk:
                await location.write(Batch([condition], [mutation]))


async def clear_meshes(location: LocationStore, meshes: Iterable[str]) -> int:
    """Delete every record under ``m/<mesh>/`` of each finished mesh, and their Actors' records
    and counters (Rules 1-3); returns how many keys were deleted or rewritten."""
    meshes = list(meshes)
    keys: list[str] = []
    limit = trio.CapacityLimiter(_AT_ONCE)

    async def scan(mesh: str) -> None:
        async with limit:
            keys.extend(await _keys_of(location, f"m/{mesh}/"))

    try:
        async with trio.open_nursery() as nursery:
            for mesh in meshes:
                nursery.start_soon(scan, mesh)
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            await location.write(Batch([], [Delete(key) for key in chunk]))
        actors = await _actor_changes(location, frozenset(MeshName(mesh) for mesh in meshes))
        await _write_changes(location, actors)
    except (ZLinkError, ExceptionGroup) as failed:
        if isinstance(failed, ExceptionGroup) and failed.split(ZLinkError)[1] is not None:
            raise
        _log.warning("could not clear finished test meshes from the store: %s", failed)
        return 0
    return len(keys) + len(actors)
