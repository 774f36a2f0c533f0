"""What the store says of the demo's hosts (specs/demo.md DEMO-3, DEMO-4, DEMO-9).

``read_store`` reads the Spot and Actor authority records of a demo's mesh (through
``_inspect``, as ``zlink-trio store inspect`` does) and keeps those of its hosts: the live view
and the summary count the activations per node from it, and the rolling update the units that
moved with their object generation (an Entry Spot never moves: each host has its own).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import zlink_trio as zl
from zlink_trio import _inspect

__all__ = ["StoreRows", "owned", "read_store"]

StoreRows = Mapping[str, tuple[str, int, bool]]
"""Authority records read from the store: key -> (owner's node RID, object generation, whether
it is an Entry Spot's)."""


async def read_store(dsn: str, mesh: str, rids: Collection[str]) -> StoreRows | None:
    """The records owned by ``rids`` in ``mesh``; ``None`` when the store could not be read."""
    try:
        snapshot = await _inspect._inspect(dsn, zl.MeshName(mesh), None)
    except Exception:  # the view is best effort; the store's own errors show in hosts
        return None
    view = snapshot.meshes.get(mesh)
    rows = list(view.spots) if view is not None else []
    rows.extend(snapshot.actors)
    return {
        row.key: (
            row.record.owner.value,
            row.record.generation.value,
            row.record.kind is zl.SpotKind.ENTRY,
        )
        for row in rows
        if row.record.owner.value in rids
    }


def owned(rows: StoreRows, rids: Collection[str]) -> dict[str, int]:
    """How many of ``rows`` each of ``rids`` owns."""
    counts = dict.fromkeys(rids, 0)
    for owner, _generation, _entry in rows.values():
        counts[owner] = counts.get(owner, 0) + 1
    return counts
