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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from zlink_trio._integration.store import Batch, Delete, Expired, LocationStore
from zlink_trio.errors import ZLinkError

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


async def _keys_of(location: LocationStore, prefix: str) -> list[str]:
    for _ in range(_RESTARTS):
        keys: list[str] = []
        cursor: str | None = None
        while True:
            page = await location.scan(prefix, _PAGE, cursor)
            if isinstance(page, Expired):
                break
            keys.extend(record.key for record in page.records)
            if page.cursor is None:
                return keys
            cursor = page.cursor
    return []


async def clear_meshes(location: LocationStore, meshes: Iterable[str]) -> int:
    """Delete every record under ``m/<mesh>/`` of each finished mesh (Rules 1, 2); returns how
    many were deleted."""
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
    except (ZLinkError, ExceptionGroup) as failed:
        if isinstance(failed, ExceptionGroup) and failed.split(ZLinkError)[1] is not None:
            raise
        _log.warning("could not clear finished test meshes from the store: %s", failed)
        return 0
    return len(keys)
