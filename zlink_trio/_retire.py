"""``zlink-trio store retire --mesh NAME``: delete every record of a mesh that has no live node
(specs/inspect.md RETIRE-1..RETIRE-3; specs/decisions.md DEC-21).

Rule 1: only a dead mesh is retired. The node records of the mesh are watched for ``silence``
seconds on the database clock (the default is the default lease and its margin, DEC-22); a
record that changes, or one that appears, means a node of the mesh is alive and nothing is
deleted. A record that stayed silent is deleted on the version seen, so a node renewing at the
last moment stops the retirement instead of losing its record.
Rule 2: what belongs to the mesh goes. Every key under ``m/<mesh>/`` (Spot records and the
generation counters that outlive them) and every Actor record that names the mesh. Actor ids
are unique across the store, so an Actor's counter (``authority.GenerationCounter``) lists every
mesh that ever claimed the id: a counter the mesh alone used is deleted, one other meshes used
too is rewritten without the mesh (they still rely on its generations, ID-6.12), and one in the
plain int form, written before counters said their meshes, is kept. Actor records and counters
change only on the version read, so a claim racing the retirement wins and the command fails
("changed while retiring") instead of deleting a live record or lowering a counter.
Rule 3: progress is shown. Each stage prints what it found, then what it deleted or rewrote, in
batches of at most 500 keys, so a large mesh shows it is moving.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import timedelta

import trio

from zlink_trio._inspect import InspectError, operator_store, scan_all
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    IfVersion,
    Put,
    Record,
    Stores,
    open_stores,
)
from zlink_trio._integration.store.config import describe_dsn
from zlink_trio._runtime.ownership.records import actor_leftovers
from zlink_trio._signals import Interrupted, run_until_signal
from zlink_trio.errors import ConfigurationError, ZLinkError
from zlink_trio.ids import MeshName

__all__ = ["DEFAULT_SILENCE", "RetireError", "retire"]

DEFAULT_SILENCE = 12.0
"""Seconds of silence that prove a node dead: the default lease (10 s) and its margin."""
_BATCH = 500


class RetireError(Exception):
    """The mesh was not retired; the text says why."""


async def _scan(stores: Stores, prefix: str) -> list[Record]:
    try:
        records, _store_now = await scan_all(stores, prefix)
    except InspectError as error:
        raise RetireError(str(error)) from None
    return records


async def _wait_for_silence(
    stores: Stores, prefix: str, silence: float, say: Callable[[str], None]
) -> dict[str, int]:
    """The node records under ``prefix`` once none changed for ``silence`` seconds on the
    database clock, key -> version (Rule 1)."""
    first = {record.key: record.version for record in await _scan(stores, prefix)}
    if not first:
        return first
    say(f"{len(first)} node record(s) found; checking that none renews for {silence:g} s")
    start = await stores.location.now()
    while True:
        now = await stores.location.now()
        if now - start >= timedelta(seconds=silence):
            break
        await trio.sleep(min(1.0, silence))
        current = {record.key: record.version for record in await _scan(stores, prefix)}
        renewed = sorted(key for key, version in current.items() if first.get(key) != version)
        if renewed:
            raise RetireError(
                f"the mesh has live nodes ({', '.join(renewed)} renewed); shut them down first"
            )
    return first


Change = tuple[IfVersion | None, Put | Delete]
"""One write of the retirement: the condition it needs, if any, and the put or delete."""


async def _apply(
    stores: Stores, changes: Sequence[Change], verb: str, say: Callable[[str], None]
) -> int:
    """Write ``changes`` in batches of ``_BATCH``; a condition that fails stops everything."""
    done = 0
    for start in range(0, len(changes), _BATCH):
        chunk = changes[start : start + _BATCH]
        batch = Batch(
            [condition for condition, _ in chunk if condition is not None],
            [operation for _, operation in chunk],
        )
        written = await stores.location.write(batch)
        if not isinstance(written, Applied):
            raise RetireError(f"{written.condition.key} changed while retiring; nothing more done")
        done += len(chunk)
        say(f"  {verb} {done}/{len(changes)}")
    return done


async def _retire(
    dsn: str, mesh: MeshName, silence: float, say: Callable[[str], None]
) -> dict[str, int]:
    prefix = f"m/{mesh.value}/"
    async with open_stores(operator_store(dsn)) as stores:
        nodes = await _wait_for_silence(stores, f"{prefix}node/", silence, say)
        keys = [record.key for record in await _scan(stores, prefix)]
        joined = sorted(k for k in keys if k.startswith(f"{prefix}node/") and k not in nodes)
        if joined:
            raise RetireError(f"a node joined the mesh while retiring ({', '.join(joined)})")
        mesh_keys: list[Change] = [
            (IfVersion(key, nodes[key]) if key in nodes else None, Delete(key)) for key in keys
        ]
        actors = actor_leftovers(
            await _scan(stores, "actor/"),
            await _scan(stores, "actor-generation/"),
            frozenset({mesh}),
        )
        say(
            f"deleting {len(keys)} key(s) of mesh {mesh.value}, {len(actors.records)} Actor "
            f"record(s) naming it and {len(actors.counters_deleted)} Actor counter(s) only it "
            f"used; rewriting {len(actors.counters_rewritten)} Actor counter(s) other meshes use "
            "too"
        )
        await _apply(stores, mesh_keys, "deleted", say)
        await _apply(stores, actors.records + actors.counters_deleted, "deleted", say)
        await _apply(stores, actors.counters_rewritten, "rewrote", say)
        return {
            "node records": len(nodes),
            "mesh keys": len(keys),
            "actor records": len(actors.records),
            "actor counters deleted": len(actors.counters_deleted),
            "actor counters rewritten": len(actors.counters_rewritten),
        }


def retire(
    dsn: str, mesh: MeshName, silence: float = DEFAULT_SILENCE, say: Callable[[str], None] = print
) -> dict[str, int]:
    """Retire ``mesh`` in the store at ``dsn`` (Rules 1-3); what was deleted, by kind.
    ``RetireError`` when it was not retired."""
    try:
        return run_until_signal(functools.partial(_retire, dsn, mesh, silence, say))
    except (RetireError, Interrupted):
        raise
    except (ZLinkError, ConfigurationError, OSError) as error:
        raise RetireError(f"cannot retire in the store at {describe_dsn(dsn)}: {error}") from None
