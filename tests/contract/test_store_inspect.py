"""``zlink-trio store inspect``: what the Location Store holds, read from outside by the command
(specs/inspect.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import attrs
import pytest
import trio
import zmq

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import (
    DSN_VARIABLE,
    Applied,
    Batch,
    Found,
    IfMissing,
    IfVersion,
    Put,
    StoreConfig,
    open_stores,
)
from zlink_trio._integration.store.embedded import EmbeddedPostgres
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

app = zl.Application()


@app.user_spot("inspect.Room")
class Room(NoMembers):
    pass


@app.actor("inspect.User")
class User(zl.Actor):
    pass


COMMAND_TIMEOUT = 60.0
NODE_GENERATION = 2**63 + 5
"""Above 2**53, so a JSON reader that took it as a number would round it."""
HAND_KEY = zmq.curve_keypair()[0].decode()
"""The hand-written node's CURVE public key (Z85)."""
HOST_VERSION = "3.0.7"
"""The application version of the host the inspections run beside (MESH-24)."""


@attrs.frozen
class Seen:
    """A host with one Spot and one Actor, and one node record written by hand."""

    mesh: str
    host: zl.Host
    spot_generation: int
    actor_id: str
    actor_generation: int
    node: NodeRecord
    node_version: int
    spot_version: int


def _environ_without_dsn() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}


async def run_cli(
    *args: str, environ: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m zlink_trio ARGS`` in a subprocess, bounded; stdout and stderr captured."""
    with trio.fail_after(COMMAND_TIMEOUT):
        return await trio.run_process(
            [sys.executable, "-m", "zlink_trio", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_environ_without_dsn() if environ is None else environ,
        )


async def put_raw(store_dsn: str, key: str, value: bytes, version: int | None = None) -> int:
    """Write ``value`` at ``key`` with a short retention, as a peer or a bad writer would: new,
    or over ``version`` as a renewal does; the version written."""
    condition = IfMissing(key) if version is None else IfVersion(key, version)
    async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
        result = await stores.location.write(
            Batch([condition], [Put(key, value, retention=timedelta(seconds=30))])
        )
    assert isinstance(result, Applied), result
    return result.versions[0]


async def version_of(store_dsn: str, key: str) -> int:
    async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
        found = await stores.location.read(key)
    assert isinstance(found, Found), key
    return found.version


@asynccontextmanager
async def populated(store_dsn: str) -> AsyncIterator[Seen]:
    mesh = f"inspect-{uuid.uuid4().hex[:8]}"
    config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, application_version=HOST_VERSION)
    async with zl.open_host(app, config) as host:
        spot = await host.spots.get_or_create("room-1", "inspect.Room").submit()
        actor_id = f"user-{uuid.uuid4().hex[:8]}"
        actor = await host.actors.create(actor_id, "inspect.User").submit()
        assert actor.actor_ref is not None
        node = NodeRecord(
            NodeRid("hand-written-node"),
            NodeGeneration(NODE_GENERATION),
            "tcp://127.0.0.1:7001",
            "tcp://127.0.0.1:7002",
            "serving",
            (StableTypeName("inspect.Room"),),
            3,
            curve_key=HAND_KEY,
            max_message_bytes=65536,
            application_version="2.10.1",
        )
        node_version = await put_raw(store_dsn, f"m/{mesh}/node/hand-written-node", node.encode())
        yield Seen(
            mesh,
            host,
            spot.spot_ref.object_generation.value,
            actor_id,
            actor.actor_ref.object_generation.value,
            node,
            node_version,
            await version_of(store_dsn, f"m/{mesh}/spot/room-1"),
        )


def _text(done: subprocess.CompletedProcess[bytes]) -> tuple[str, str]:
    return done.stdout.decode(), done.stderr.decode()


@pytest.mark.spec("INSPECT-1", "INSPECT-2", "MESH-24")
async def test_inspect_lists_nodes_spots_and_actors(store_dsn: str) -> None:
    """The text listing names the node record (generation, state, application version,
    endpoints, security, message limit, load, version), the Spot (id, generation, kind, type,
    owner RID, version) and the Actor (kind printed as ``actor``)."""
    async with populated(store_dsn) as seen:
        done = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", seen.mesh)
        out, err = _text(done)
        assert 0 == done.returncode, err
        assert f"mesh {seen.mesh}" in out
        owner = seen.host.node_rid.value
        node_line = next(line for line in out.splitlines() if "hand-written-node" in line)
        assert f"generation {NODE_GENERATION}" in node_line
        assert "serving" in node_line
        assert "load 3" in node_line
        assert "application version 2.10.1  " in node_line
        assert f"version {seen.node_version}" in node_line
        own_line = next(line for line in out.splitlines() if owner in line and "load" in line)
        assert f"application version {HOST_VERSION}  " in own_line
        assert (
            "application tcp://127.0.0.1:7001  completion tcp://127.0.0.1:7002  "
            f"security curve {HAND_KEY}  message limit 65536"
        ) in out
        spot_line = next(line for line in out.splitlines() if line.strip().startswith("room-1"))
        assert f"generation {seen.spot_generation}" in spot_line
        assert "user inspect.Room" in spot_line
        assert f"owner {owner}" in spot_line
        assert spot_line.endswith(f"version {seen.spot_version}")
        actor_line = next(line for line in out.splitlines() if seen.actor_id in line)
        assert f"generation {seen.actor_generation}" in actor_line
        assert "actor inspect.User" in actor_line
        assert f"owner {owner}" in actor_line


@pytest.mark.spec("INSPECT-1", "INSPECT-2", "INSPECT-4")
async def test_inspect_json_holds_the_fields_with_generations_as_strings(store_dsn: str) -> None:
    """``--json`` is one document; generations are decimal strings; without ``--mesh`` the mesh is
    found under ``m/`` with the same records."""
    async with populated(store_dsn) as seen:
        done = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", seen.mesh, "--json")
        out, err = _text(done)
        assert 0 == done.returncode, err
        document = json.loads(out)
        assert [seen.mesh] == list(document["meshes"])
        mesh = document["meshes"][seen.mesh]
        assert [] == mesh["undecodable"]
        [node] = [node for node in mesh["nodes"] if node["rid"] == "hand-written-node"]
        assert {
            "key": f"m/{seen.mesh}/node/hand-written-node",
            "rid": "hand-written-node",
            "generation": str(NODE_GENERATION),
            "state": "serving",
            "application_endpoint": "tcp://127.0.0.1:7001",
            "completion_endpoint": "tcp://127.0.0.1:7002",
            "types": ["inspect.Room"],
            "load": 3,
            "application_version": "2.10.1",
            "curve_key": HAND_KEY,
            "max_message_bytes": 65536,
            "version": seen.node_version,
        } == node
        [own] = [node for node in mesh["nodes"] if node["rid"] == seen.host.node_rid.value]
        assert HOST_VERSION == own["application_version"]
        [spot] = [spot for spot in mesh["spots"] if spot["spot_id"] == "room-1"]
        assert str(seen.spot_generation) == spot["generation"]
        assert "user" == spot["kind"]
        assert "inspect.Room" == spot["type"]
        assert seen.host.node_rid.value == spot["owner"]
        assert isinstance(spot["owner_generation"], str)
        assert int(spot["owner_generation"]) > 0
        assert seen.spot_version == spot["version"]
        [actor] = [actor for actor in document["actors"] if actor["actor_id"] == seen.actor_id]
        assert f"actor/{seen.actor_id}" == actor["key"]
        assert str(seen.actor_generation) == actor["generation"]
        assert "actor" == actor["kind"]
        assert "inspect.User" == actor["type"]
        assert seen.host.node_rid.value == actor["owner"]

        every = await run_cli("store", "inspect", "--dsn", store_dsn, "--json")
        assert 0 == every.returncode, every.stderr.decode()
        assert mesh["spots"] == json.loads(every.stdout)["meshes"][seen.mesh]["spots"]


@pytest.mark.spec("INSPECT-3")
async def test_undecodable_records_are_listed_not_fatal(store_dsn: str) -> None:
    """Bad bytes under a Spot key and a node key are listed with their keys; exit 0."""
    mesh = f"inspect-{uuid.uuid4().hex[:8]}"
    await put_raw(store_dsn, f"m/{mesh}/spot/x", b"\xff\x00 not cbor")
    await put_raw(store_dsn, f"m/{mesh}/node/broken", b"\xa0")  # an empty CBOR map
    done = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", mesh)
    out, err = _text(done)
    assert 0 == done.returncode, err
    assert "undecodable (2):" in out
    assert f"m/{mesh}/spot/x:" in out
    assert f"m/{mesh}/node/broken:" in out
    assert "spots (0):" in out

    as_json = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", mesh, "--json")
    assert 0 == as_json.returncode, as_json.stderr.decode()
    view = json.loads(as_json.stdout)["meshes"][mesh]
    assert {f"m/{mesh}/spot/x", f"m/{mesh}/node/broken"} == {
        item["key"] for item in view["undecodable"]
    }
    assert ([], []) == (view["nodes"], view["spots"])


@pytest.mark.spec("INSPECT-5")
async def test_without_a_dsn_an_empty_data_folder_is_refused_with_status_2(
    tmp_path: Path,
) -> None:
    """No ``--dsn``, no ``ZLINK_STORE_DSN`` and a data folder without a database: a clear
    message, exit 2, and the folder is not created."""
    folder = tmp_path / "nothing-here"
    done = await run_cli("store", "inspect", "--data-dir", str(folder), "--mesh", "anything")
    out, err = _text(done)
    assert 2 == done.returncode
    assert f"no store to inspect: no embedded store in {folder}" in err
    assert "Traceback" not in err
    assert "" == out
    assert not folder.exists()


@pytest.mark.spec("INSPECT-5", "STORE-36")
async def test_without_a_dsn_the_embedded_store_is_joined_and_inspected(pg_folder: Path) -> None:
    """No DSN: the command reads the embedded store of ``--data-dir``, joining the server this
    test holds, and leaves it running for this test."""
    data_dir = pg_folder / "pg"
    holder = EmbeddedPostgres(data_dir)
    dsn = await holder.start(60)
    try:
        mesh = f"emb-{uuid.uuid4().hex[:8]}"
        await put_raw(dsn, f"m/{mesh}/spot/x", b"not cbor")
        done = await run_cli("store", "inspect", "--data-dir", str(data_dir), "--mesh", mesh)
        out, err = _text(done)
        assert 0 == done.returncode, err
        assert f"m/{mesh}/spot/x" in out
        assert (data_dir / "postmaster.pid").exists()
        await put_raw(dsn, f"m/{mesh}/spot/y", b"still served")
    finally:
        await holder.stop(60)


@pytest.mark.spec("INSPECT-6")
async def test_an_unreachable_store_is_one_line_and_status_1() -> None:
    """A DSN nobody answers: one line on stderr naming where, no password, exit 1."""
    done = await run_cli(
        "store", "inspect", "--dsn", "postgresql://nobody:hunter2@127.0.0.1:1/none"
    )
    out, err = _text(done)
    assert 1 == done.returncode
    assert "Traceback" not in err
    assert 1 == len(err.strip().splitlines()), err
    assert "127.0.0.1:1/none" in err
    assert "hunter2" not in err
    assert "" == out


@pytest.mark.spec("INSPECT-6")
async def test_a_dsn_that_is_no_postgresql_url_is_named_as_such() -> None:
    """A DSN without the postgresql:// scheme: one line saying so (not a made-up host and
    database read out of it), exit 1."""
    done = await run_cli("store", "inspect", "--dsn", "not a dsn")
    out, err = _text(done)
    assert 1 == done.returncode
    assert 1 == len(err.strip().splitlines()), err
    assert err.startswith(
        "zlink-trio store inspect: cannot read a DSN that is not a postgresql:// URL: "
    ), err
    assert "" == out


@pytest.mark.spec("INSPECT-6")
@pytest.mark.parametrize(
    "args",
    [
        ("store",),
        ("store", "inspect", "--mesh", ""),
        ("store", "inspect", "--frobnicate"),
        ("store", "peek"),
    ],
)
async def test_bad_arguments_are_usage_errors(args: tuple[str, ...]) -> None:
    """Bad arguments are argparse's usage error: exit 2, usage on stderr, no traceback."""
    done = await run_cli(*args)
    _out, err = _text(done)
    assert 2 == done.returncode
    assert "usage: zlink-trio" in err
    assert "Traceback" not in err


@pytest.mark.spec("INSPECT-1")
async def test_a_node_record_shows_the_version_each_renewal_moves(store_dsn: str) -> None:
    """A node record is shown with its store version and no lease; rewritten on its version as
    a renewal does, the next inspection shows the new version. A running host's own record is
    listed the same way."""
    mesh = f"inspect-{uuid.uuid4().hex[:8]}"
    key = f"m/{mesh}/node/renewing"
    node = NodeRecord(NodeRid("renewing"), NodeGeneration(NODE_GENERATION))

    async def node_line() -> str:
        done = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", mesh)
        out, err = _text(done)
        assert 0 == done.returncode, err
        return next(line for line in out.splitlines() if "renewing" in line)

    first = await put_raw(store_dsn, key, node.encode())
    line = await node_line()
    assert line.endswith(f"load 0  version {first}")
    renewed = await put_raw(store_dsn, key, node.encode(), version=first)
    assert renewed != first
    assert (await node_line()).endswith(f"load 0  version {renewed}")

    config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
    async with zl.open_host(app, config) as host:
        own_key = f"m/{mesh}/node/{host.node_rid.value}"
        before = await version_of(store_dsn, own_key)
        done = await run_cli("store", "inspect", "--dsn", store_dsn, "--mesh", mesh, "--json")
        after = await version_of(store_dsn, own_key)
        assert 0 == done.returncode, done.stderr.decode()
        rows = json.loads(done.stdout)["meshes"][mesh]["nodes"]
        [own] = [row for row in rows if row["key"] == own_key]
        assert "lease_remaining" not in own
        assert before <= own["version"] <= after  # renewals may write between the reads
