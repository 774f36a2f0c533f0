"""``zlink-trio store retire --mesh NAME``: delete every record of a mesh that has no live node
(specs/inspect.md RETIRE-1..RETIRE-4; specs/decisions.md DEC-21).

Rule 1: only a dead mesh is retired. The node records of the mesh are watched for ``silence``
seconds on the database clock (the default is the default lease and its margin, DEC-22); a
record that changes, or one that appears, means a node of the mesh is alive and nothing is
deleted. A record that stayed silent is deleted on the version seen, so a node renewing at the
last moment stops the retirement instead of losing its record.
Rule 2: what belongs to the mesh goes. Every key under ``m/<mesh>/`` (Spot records and the
generation counters that outlive them) and every Actor record that names the mesh, with that
Actor id's generation counter. An Actor counter without a record names no mesh, so it is kept:
Actor ids are unique across the store, and the counter may belong to a mesh still in use.
Rule 3: progress is shown. Each stage prints what it found and deleted, in batches of at most
500 keys, so a large mesh shows it is moving.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import trio

from zlink_trio._inspect import InspectError, operator_store, scan_all
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    Found,
    IfVersion,
    Record,
    Stores,
    open_stores,
)
from zlink_trio._integration.store.config import describe_dsn
from zlink_trio._runtime.ownership.authority import SpotRecord
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


async def _delete(
    stores: Stores, keys: list[str], conditions: dict[str, int], say: Callable[[str], None]
) -> int:
    done = 0
    for start in range(0, len(keys), _BATCH):
        chunk = keys[start : start + _BATCH]
        batch = Batch(
            [IfVersion(key, conditions[key]) for key in chunk if key in conditions],
            [Delete(key) for key in chunk],
        )
        written = await stores.location.write(batch)
        if not isinstance(written, Applied):
            raise RetireError(f"{written.condition.key} changed while retiring; nothing more done")
        done += len(chunk)
        say(f"  deleted {done}/{len(keys)}")
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
        actor_keys: list[str] = []
        for record in await _scan(stores, "actor/"):
            try:
                owner = SpotRecord.decode(record.value)
            except Exception:  # a record of another shape names no mesh of ours
                continue
            if owner.mesh == mesh:
                actor_id = record.key[len("actor/") :]
                actor_keys += [record.key, f"actor-generation/{actor_id}"]
        for key in list(actor_keys[1::2]):
            if not isinstance(await stores.location.read(key), Found):
                actor_keys.remove(key)
        say(f"deleting {len(keys)} key(s) of mesh {mesh.value} and {len(actor_keys)} of its Actors")
        await _delete(stores, keys, nodes, say)
        await _delete(stores, actor_keys, {}, say)
        return {
            "node records": len(nodes),
            "mesh keys": len(keys),
            "actor keys": len(actor_keys),
        }


def retire(
    dsn: str, mesh: MeshName, silence: float = DEFAULT_SILENCE, say: Callable[[str], None] = print
) -> dict[str, int]:
    """Retire ``mesh`` in the store at ``dsn`` (Rules 1-3); what was deleted, by kind.
    ``RetireError`` when it was not retired."""
    try:
        return trio.run(_retire, dsn, mesh, silence, say)
    except RetireError:
        raise
    except (ZLinkError, ConfigurationError, OSError) as error:
        raise RetireError(f"cannot retire in the store at {describe_dsn(dsn)}: {error}") from None
