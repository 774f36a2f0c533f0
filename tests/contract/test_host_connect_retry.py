"""Hosts of one mesh whose transport fails to connect to a peer keep serving and reach the peer
once a retry succeeds (specs/transport.md TRN-29, TRN-30; issue 16 item 3)."""

from __future__ import annotations

import errno
import logging
import uuid

import attrs
import pytest
import trio
import zmq

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.transport.links import MeshSockets
from zlink_trio._integration.transport.socket import OutboundLink

app = zl.Application()


@app.message("retry.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("retry.Answer")
@attrs.frozen
class Answer:
    node_rid: str
    text: str


@app.user_spot("retry.Room")
class Room(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.node_rid.value, req.text)


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.mark.spec("TRN-29", "MESH-19", "DEC-30")
async def test_a_host_whose_connect_to_a_peer_fails_keeps_serving_and_reaches_it_after_a_retry(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first host's sockets towards the third fail twice with EMFILE: all three hosts start,
    the first serves the second and calls it, logs the third once and reaches it after a retry."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    first_rid, second_rid, third_rid = fresh("first"), fresh("second"), fresh("third")
    failures: list[str] = []
    towards_third: set[str] = set()
    real = MeshSockets._open_link

    def flaky(sockets: MeshSockets, endpoint: str, hwm: int, key: bytes | None) -> OutboundLink:
        first_to_third = sockets._config.node_rid.value == first_rid and endpoint in towards_third
        if first_to_third and len(failures) < 2:
            failures.append(endpoint)
            raise zmq.ZMQError(errno.EMFILE)
        return real(sockets, endpoint, hwm, key)

    mesh = fresh("retry")

    def config(rid: str) -> zl.HostConfig:
        return zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_rid=rid)

    async with zl.open_host(app, config(third_rid)) as third:
        transport = third._tree.remote.mesh  # the third's transport (internal)
        assert transport is not None
        towards_third.update((transport.application_endpoint, transport.completion_endpoint))
        monkeypatch.setattr(MeshSockets, "_open_link", flaky)
        async with (
            zl.open_host(app, config(first_rid)) as first,
            zl.open_host(app, config(second_rid)) as second,
        ):
            rooms = [fresh("room") for _ in range(3)]
            for host, room in zip((first, second, third), rooms, strict=True):
                await host.spots.get_or_create(room, "retry.Room").submit()
            with trio.fail_after(15):
                served = await second.route.request_to_spot(
                    rooms[0], Ask("served"), reply_type=Answer
                ).submit()
                answers = [
                    await first.route.request_to_spot(room, Ask("hi"), reply_type=Answer)
                    .timeout(10)
                    .submit()
                    for room in rooms[1:]
                ]
    assert Answer(first_rid, "served") == served
    assert [Answer(second_rid, "hi"), Answer(third_rid, "hi")] == answers
    assert 2 == len(failures)
    logged = [r.getMessage() for r in caplog.records if "cannot connect to peer" in r.getMessage()]
    assert 1 == len(logged)
    assert logged[0].startswith(f"cannot connect to peer {third_rid}: ")


@pytest.mark.spec("TRN-30", "DEC-29")
def test_max_peers_defaults_to_128_and_is_checked_with_the_host_config() -> None:
    """HostConfig.max_peers is 128 unless set, and outside 1..16000 it fails the config."""
    assert 128 == zl.HostConfig(mesh="m").max_peers
    for bad in (0, 16_001, True, 2.0):
        with pytest.raises(zl.ConfigurationError, match="max_peers"):
            zl.HostConfig(mesh="m", max_peers=bad)  # type: ignore[arg-type]  # bad on purpose
