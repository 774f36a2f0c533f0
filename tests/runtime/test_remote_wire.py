"""What a host does with bad application input from a peer (specs/routing.md ROUTE-9): a
request whose payload or type cannot be decoded is answered PROTOCOL_ERROR, a send like it is
dropped, and the host goes on serving. The peer here is a bare RouteMesh that the test
publishes in the store as a node of the mesh, so the host connects to it like to any peer."""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Batch, Found, IfMissing, Put, StoreConfig, open_stores
from zlink_trio._integration.transport import (
    MeshConfig,
    PeerAddress,
    PeerRun,
    RouteUp,
    curve_public,
    new_curve_secret,
    open_route_mesh,
)
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._wire import OperationId, Request, Send
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

app = zl.Application()


@app.message("wire.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("wire.Answer")
@attrs.frozen
class Answer:
    text: str


@app.user_spot("wire.Room")
class Room(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.text)


async def ignore(origin: PeerRun, message: Send | Request) -> None:
    del origin, message


@pytest.mark.spec("ROUTE-9", "ERR-5.6")
async def test_undecodable_input_from_a_peer_is_refused_and_the_host_goes_on(
    store_dsn: str,
) -> None:
    mesh = f"w-{uuid.uuid4().hex[:8]}"
    room = SpotId(f"room-{uuid.uuid4().hex[:8]}")
    fake = NodeRid(f"fake-{uuid.uuid4().hex[:8]}")
    generation = NodeGeneration.new()
    secret = new_curve_secret()  # a member's key: the host accepts only members (SEC-2)
    config = MeshConfig(
        mesh=MeshName(mesh), node_rid=fake, generation=generation, curve_secret_key=secret
    )
    async with (
        open_stores(StoreConfig(dsn=store_dsn)) as stores,
        zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as host,
        open_route_mesh(config, ignore) as peer,
    ):
        await host.spots.get_or_create(room.value, "wire.Room").submit()
        record = NodeRecord(
            fake,
            generation,
            peer.application_endpoint,
            peer.completion_endpoint,
            curve_key=curve_public(secret).decode(),
        )
        key = f"m/{mesh}/node/{fake.value}"
        await stores.location.write(
            Batch([IfMissing(key)], [Put(key, record.encode(), timedelta(seconds=60))])
        )
        found = await stores.location.read(f"m/{mesh}/node/{host.node_rid.value}")
        assert isinstance(found, Found)
        own = NodeRecord.decode(found.value)
        peer.add_peer(
            PeerAddress(
                host.node_rid,
                own.application_endpoint,
                own.completion_endpoint,
                own.curve_key.encode(),
            )
        )

        async def ask(message_type: str, payload: bytes) -> object:
            return await peer.request(
                host.node_rid,
                operation_id=OperationId.new(),
                target=room,
                message_type=StableTypeName(message_type),
                payload=payload,
                timeout=5.0,
            )

        with trio.fail_after(20):
            # The host connects once its membership sees the record; then its route is up.
            async for change in peer.route_changes:
                if isinstance(change, RouteUp) and change.run.node_rid == host.node_rid:
                    break
            for message_type, payload in (("wire.Ask", b"\xff\x00garbage"), ("wire.Nope", b"")):
                with pytest.raises(zl.ZLinkError) as caught:
                    await ask(message_type, payload)
                assert zl.ErrorKind.PROTOCOL_ERROR == caught.value.kind
            await peer.send(host.node_rid, Send(room, StableTypeName("wire.Ask"), b"\xffnot cbor"))
            reply = await ask("wire.Ask", b"\xa1dtextbhi")  # {"text": "hi"} in CBOR
        assert "wire.Answer" == reply.reply_type.value  # type: ignore[attr-defined]
        answer = await host.route.request_to_spot(room, Ask("still"), reply_type=Answer).submit()
        assert Answer("still") == answer
