"""Strangers are refused, across processes (specs/security.md SEC-2, SEC-3; issue 12, item 3).

The attacked host runs in a process of its own (``security_child.py``); this process runs a
legitimate member of the mesh and, beside it, raw ZeroMQ sockets that know everything the store
publishes: the owner's endpoint and public key, the member's RID, generation and its run's
routing identity (before SEC-7 its links' routing id). Before transport security, both kinds of
stranger had their notes handled (and the borrowed routing id black-holed the member); now
neither gets anything handled and the member's traffic is complete.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio
import zmq

import zlink_trio as zl
from tests.e2e import security_app
from tests.e2e.harness import until_ready
from zlink_trio._integration.store import Found, StoreConfig, open_stores
from zlink_trio._integration.transport import curve_public, new_curve_secret, routing_identity
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._wire import (
    PROTOCOL_VERSION,
    ConnectionRole,
    Hello,
    MessageTypes,
    Send,
    encode,
)
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId

CHILD = Path(__file__).resolve().parent / "security_child.py"
NOTES = 50


async def owner_record(store_dsn: str, mesh: str) -> NodeRecord:
    async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
        found = await stores.location.read(f"m/{mesh}/node/owner")
    assert isinstance(found, Found)
    return NodeRecord.decode(found.value)


def stranger(record: NodeRecord, identity: bytes | None, curve: bool) -> zmq.Socket[bytes]:
    """A DEALER to the owner's application endpoint: a CURVE client with a key of its own (the
    owner's public key is public), or a plain one."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        socket.setsockopt(zmq.ROUTING_ID, identity)
    if curve:
        secret = new_curve_secret()
        socket.setsockopt(zmq.CURVE_SERVERKEY, record.curve_key.encode())
        socket.setsockopt(zmq.CURVE_PUBLICKEY, curve_public(secret))
        socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
    socket.connect(record.application_endpoint)
    return socket


@pytest.mark.spec("SEC-2", "SEC-3")
async def test_strangers_get_nothing_handled_and_the_member_is_not_disturbed(
    store_dsn: str,
) -> None:
    """A stranger with a CURVE key of its own, one that borrows the member's routing id and
    Hello, and a plain one each send notes to the owner's Spot while the member sends its own:
    the Spot heard exactly the member's notes, and the member's requests were all answered."""
    mesh = f"sec-{uuid.uuid4().hex[:8]}"
    room = f"room-{uuid.uuid4().hex[:6]}"
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), "--mesh", mesh, "--dsn", store_dsn, "--room", room],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    types = MessageTypes()
    types.register("sece2e.Note", security_app.Note)
    name, payload = types.encode(security_app.Note("stranger"))
    note = encode(Send(SpotId(room), name, payload, None, ()))
    sockets: list[zmq.Socket[bytes]] = []
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        await until_ready(process)
        record = await owner_record(store_dsn, mesh)
        assert record.curve_key  # the owner publishes its key (SEC-1)
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_rid="member")
        async with zl.open_host(security_app.app, config) as member:
            borrowed = routing_identity(NodeRid("member"), member.node_generation)
            sockets = [
                stranger(record, None, curve=True),
                stranger(record, borrowed, curve=True),
                stranger(record, None, curve=False),
            ]
            for claimed, socket in zip(("stranger", "member", "plain"), sockets, strict=True):
                generation = member.node_generation if claimed == "member" else NodeGeneration.new()
                socket.send_multipart(
                    encode(
                        Hello(
                            PROTOCOL_VERSION,
                            MeshName(mesh),
                            NodeRid(claimed),
                            generation,
                            ConnectionRole.APPLICATION,
                        )
                    )
                )
            with trio.fail_after(60):
                # The strangers' notes go first: without security they would be heard first.
                for _ in range(NOTES):
                    for socket in sockets:
                        socket.send_multipart(note)
                for number in range(NOTES):
                    await member.route.send_to_spot(
                        room, security_app.Note(f"member-{number}")
                    ).submit()
                while True:  # the notes are one-way: ask until the last one was handled
                    asked = member.route.request_to_spot(
                        room, security_app.Ask(), reply_type=security_app.Heard
                    )
                    heard = (await asked.timeout(10).submit()).texts
                    if f"member-{NOTES - 1}" in heard:
                        break
                    await trio.sleep(0.05)
            assert [f"member-{number}" for number in range(NOTES)] == list(heard)
            await member.shutdown()
    finally:
        for socket in sockets:
            socket.close()
        if process.stdin is not None:
            await process.stdin.aclose()
        with trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
