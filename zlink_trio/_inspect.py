"""``zlink-trio store inspect``: what the Location Store holds, read-only (specs/inspect.md).

It reads three kinds of record and writes nothing:

    m/<mesh>/node/<rid>     a node run's record (``node_record.NodeRecord``, MESH-1)
    m/<mesh>/spot/<id>      a Spot's authority record (``authority.SpotRecord``)
    actor/<id>              an Actor's authority record; Actor ids are global, so no mesh prefix

Every scan pages with its cursor on one snapshot and starts again when the snapshot expired. A
record that does not decode is listed as undecodable with its key: one bad writer must not hide
the rest of the store (INSPECT-3). Other keys under a mesh (generation counters) are not shown.

Records are shown with their store version, not with a lease: node and authority records carry
no expiry (DEC-22). A live node rewrites its record on every renewal, so its version moves
between two inspections a renewal apart while a silent node's stays (what peers and ``store
retire`` watch); one inspection alone cannot tell them apart, and does not pretend to.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path

import attrs

from zlink_trio._integration.store import Expired, Record, StoreConfig, Stores, open_stores
from zlink_trio._integration.store.config import describe_dsn
from zlink_trio._runtime.ownership.authority import SpotRecord
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._signals import Interrupted, run_until_signal
from zlink_trio.errors import ConfigurationError, ZLinkError
from zlink_trio.ids import MeshName, SpotKind

__all__ = ["InspectError", "Snapshot", "inspect", "render_json", "render_text"]

PAGE_LIMIT = 500
"""Records asked for per scan page."""
SCAN_RESTARTS = 5
"""How often one scan starts again after its snapshot expired before the command gives up."""
STORE_TIMEOUT = 10.0
"""Seconds allowed for opening the store and for each store call."""

MESH_PREFIX = "m/"
ACTOR_PREFIX = "actor/"


class InspectError(Exception):
    """The store could not be read; the message is one line for people."""


@attrs.frozen
class Undecodable:
    key: str
    error: str


@attrs.frozen
class NodeRow:
    key: str
    record: NodeRecord
    version: int
    """The record's store version: every renewal of a live node writes a new one."""


@attrs.frozen
class AuthorityRow:
    key: str
    object_id: str
    record: SpotRecord
    version: int


@attrs.frozen
class MeshView:
    name: str
    nodes: list[NodeRow] = attrs.field(factory=list)
    spots: list[AuthorityRow] = attrs.field(factory=list)
    undecodable: list[Undecodable] = attrs.field(factory=list)


@attrs.frozen
class Snapshot:
    """What one inspection read: meshes by name, and the global Actor records."""

    store_now: datetime | None
    meshes: dict[str, MeshView]
    actors: list[AuthorityRow]
    actor_undecodable: list[Undecodable]


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


async def scan_all(stores: Stores, prefix: str) -> tuple[list[Record], datetime | None]:
    """Every live record under ``prefix`` from one snapshot, with that snapshot's clock."""
    for _attempt in range(SCAN_RESTARTS):
        records: list[Record] = []
        store_now: datetime | None = None
        cursor: str | None = None
        while True:
            page = await stores.location.scan(prefix, PAGE_LIMIT, cursor)
            if isinstance(page, Expired):
                break
            records.extend(page.records)
            store_now = page.store_now if store_now is None else store_now
            cursor = page.cursor
            if cursor is None:
                return records, store_now
    raise InspectError(f"the scan of {prefix!r} kept expiring; try again")


def _node_row(record: Record) -> NodeRow | Undecodable:
    try:
        decoded = NodeRecord.decode(record.value)
    except Exception as error:  # a bad record of any shape is reported, never raised
        return Undecodable(record.key, _one_line(error))
    return NodeRow(record.key, decoded, record.version)


def _authority_row(record: Record, object_id: str) -> AuthorityRow | Undecodable:
    try:
        decoded = SpotRecord.decode(record.value)
    except Exception as error:  # cbor2 and the id types raise several unrelated types
        return Undecodable(record.key, _one_line(error))
    return AuthorityRow(record.key, object_id, decoded, record.version)


def _file_mesh_record(meshes: dict[str, MeshView], mesh: str, rest: str, record: Record) -> None:
    view = meshes.setdefault(mesh, MeshView(mesh))
    kind, _, name = rest.partition("/")
    if kind == "node" and name:
        node = _node_row(record)
        if isinstance(node, Undecodable):
            view.undecodable.append(node)
        else:
            view.nodes.append(node)
    elif kind == "spot" and name:
        spot = _authority_row(record, name)
        if isinstance(spot, Undecodable):
            view.undecodable.append(spot)
        else:
            view.spots.append(spot)


async def _read(stores: Stores, mesh: MeshName | None) -> Snapshot:
    prefix = MESH_PREFIX if mesh is None else f"{MESH_PREFIX}{mesh.value}/"
    mesh_records, mesh_now = await scan_all(stores, prefix)
    actor_records, actor_now = await scan_all(stores, ACTOR_PREFIX)
    meshes: dict[str, MeshView] = {}
    if mesh is not None:
        meshes[mesh.value] = MeshView(mesh.value)
    for record in mesh_records:
        if mesh is None:
            name, _, rest = record.key[len(MESH_PREFIX) :].partition("/")
        else:
            name, rest = mesh.value, record.key[len(prefix) :]
        _file_mesh_record(meshes, name, rest, record)
    actors: list[AuthorityRow] = []
    actor_undecodable: list[Undecodable] = []
    for record in actor_records:
        actor = _authority_row(record, record.key[len(ACTOR_PREFIX) :])
        if isinstance(actor, Undecodable):
            actor_undecodable.append(actor)
        else:
            actors.append(actor)
    store_now = mesh_now or actor_now
    return Snapshot(store_now, dict(sorted(meshes.items())), actors, actor_undecodable)


def operator_store(dsn: str | None, data_dir: Path | None = None) -> StoreConfig:
    """The small store connection an operator's command uses: no notifications, a pool of at
    most three, ``STORE_TIMEOUT`` on every call (also ``store retire``). ``dsn`` None: the
    embedded server of ``data_dir``, joined as one more user (STORE-36)."""
    return StoreConfig(
        dsn=dsn,
        data_dir=data_dir,
        pool_min_size=1,
        pool_max_size=3,
        operation_timeout=STORE_TIMEOUT,
        startup_timeout=STORE_TIMEOUT,
        notifications=False,
    )


async def _inspect(dsn: str | None, mesh: MeshName | None, data_dir: Path | None) -> Snapshot:
    async with open_stores(operator_store(dsn, data_dir), environ={}) as stores:
        return await _read(stores, mesh)


def inspect(dsn: str | None, mesh: MeshName | None, data_dir: Path | None = None) -> Snapshot:
    """Read the store at ``dsn``, or with ``dsn`` None the embedded store in ``data_dir`` (one
    mesh, or every mesh); ``InspectError`` when it cannot."""
    where = describe_dsn(dsn) if dsn is not None else f"the embedded store in {data_dir}"
    try:
        return run_until_signal(functools.partial(_inspect, dsn, mesh, data_dir))
    except (InspectError, Interrupted):
        raise
    except (ZLinkError, ConfigurationError, OSError) as error:
        raise InspectError(f"cannot read {where}: {_one_line(error)}") from None
    except Exception as error:  # a driver error of any type: one line, not a traceback
        raise InspectError(
            f"cannot read {where}: {type(error).__name__}: {_one_line(error)}"
        ) from None


# --- rendering ---------------------------------------------------------------------------------


def _kind_name(kind: SpotKind) -> str:
    return "actor" if kind is SpotKind.INVALID else kind.name.lower()


def _node_json(row: NodeRow) -> dict[str, object]:
    record = row.record
    return {
        "key": row.key,
        "rid": record.rid.value,
        "generation": str(record.generation.value),
        "state": record.state,
        "application_endpoint": record.application_endpoint,
        "completion_endpoint": record.completion_endpoint,
        "types": [name.value for name in record.types],
        "load": record.load,
        "application_version": record.application_version,
        "curve_key": record.curve_key,
        "max_message_bytes": record.max_message_bytes,
        "version": row.version,
    }


def _authority_json(row: AuthorityRow, id_field: str) -> dict[str, object]:
    record = row.record
    return {
        "key": row.key,
        id_field: row.object_id,
        "generation": record.generation.to_json(),
        "kind": _kind_name(record.kind),
        "type": record.type_name.value,
        "state": record.state,
        "owner": record.owner.value,
        "owner_generation": str(record.owner_generation.value),
        "version": row.version,
    }


def _undecodable_json(items: list[Undecodable]) -> list[dict[str, str]]:
    return [{"key": item.key, "error": item.error} for item in items]


def render_json(snapshot: Snapshot) -> str:
    """One JSON document; generations are decimal strings (ID rules, seed 000)."""
    document = {
        "store_now": None if snapshot.store_now is None else snapshot.store_now.isoformat(),
        "meshes": {
            name: {
                "nodes": [_node_json(row) for row in view.nodes],
                "spots": [_authority_json(row, "spot_id") for row in view.spots],
                "undecodable": _undecodable_json(view.undecodable),
            }
            for name, view in snapshot.meshes.items()
        },
        "actors": [_authority_json(row, "actor_id") for row in snapshot.actors],
        "actor_undecodable": _undecodable_json(snapshot.actor_undecodable),
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def _authority_line(row: AuthorityRow) -> str:
    record = row.record
    return (
        f"{row.object_id}  generation {record.generation.value}  {_kind_name(record.kind)} "
        f"{record.type_name.value}  {record.state}  owner {record.owner.value} "
        f"(node generation {record.owner_generation.value})  version {row.version}"
    )


def _undecodable_lines(items: list[Undecodable], indent: str) -> list[str]:
    if not items:
        return []
    lines = [f"{indent}undecodable ({len(items)}):"]
    lines.extend(f"{indent}  {item.key}: {item.error}" for item in items)
    return lines


def render_text(snapshot: Snapshot) -> str:
    """The human-readable listing: one block per mesh, then the global Actor records."""
    lines: list[str] = []
    if snapshot.store_now is not None:
        lines.append(f"store clock {snapshot.store_now.isoformat()}")
    if not snapshot.meshes:
        lines.append("no meshes")
    for name, view in snapshot.meshes.items():
        lines.append(f"mesh {name}")
        lines.append(f"  nodes ({len(view.nodes)}):")
        for node in view.nodes:
            record = node.record
            lines.append(
                f"    {record.rid.value}  generation {record.generation.value}  {record.state}  "
                f"application version {record.application_version}  load {record.load}  "
                f"version {node.version}"
            )
            security = f"curve {record.curve_key}" if record.curve_key else "none"
            limit = record.max_message_bytes
            lines.append(
                f"      application {record.application_endpoint or '-'}  "
                f"completion {record.completion_endpoint or '-'}  security {security}  "
                f"message limit {'unpublished' if limit is None else limit}"
            )
        lines.append(f"  spots ({len(view.spots)}):")
        lines.extend(f"    {_authority_line(spot)}" for spot in view.spots)
        lines.extend(_undecodable_lines(view.undecodable, "  "))
    lines.append(f"actors, all meshes ({len(snapshot.actors)}):")
    lines.extend(f"  {_authority_line(actor)}" for actor in snapshot.actors)
    lines.extend(_undecodable_lines(snapshot.actor_undecodable, ""))
    return "\n".join(lines)
