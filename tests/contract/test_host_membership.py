"""A host's node record in the store: published at start, draining while it shuts down,
withdrawn at the end; hosts of one mesh see each other (specs/mesh.md MESH-18)."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Found, StoreConfig, open_stores
from zlink_trio._runtime.ownership.node_record import (
    NodeRecord,
    PeerChanged,
    PeerDown,
    PeerEvent,
    PeerUp,
)

app = zl.Application()


class Pause:
    def __init__(self) -> None:
        self.closing = trio.Event()
        self.proceed = trio.Event()


pause = Pause()


@app.user_spot("member.Room")
class Room(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        pause.closing.set()
        await pause.proceed.wait()


async def next_about(
    events: trio.MemoryReceiveChannel[PeerEvent], rid: zl.NodeRid, kind: type
) -> PeerEvent:
    """The next event of ``kind`` about the node ``rid`` that a peer's membership reports."""
    with trio.fail_after(15):
        async for event in events:
            about = event.rid if isinstance(event, PeerDown) else event.record.rid
            if about == rid and isinstance(event, kind):
                return event
    raise AssertionError("the membership ended")


@pytest.mark.spec("MESH-18", "MESH-19")
async def test_a_host_publishes_drains_and_withdraws_its_node_record(store_dsn: str) -> None:
    """Two hosts of one mesh find each other through the store; while one shuts down its record
    says draining, and once shutdown returns the record is gone and the other no longer lists it."""
    mesh = f"t-{uuid.uuid4().hex[:8]}"
    config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, closing_timeout=10.0)
    async with (
        open_stores(StoreConfig(dsn=store_dsn)) as stores,
        zl.open_host(app, config) as first,
        zl.open_host(app, config) as second,
    ):
        key = f"m/{mesh}/node/{first.node_rid.value}"
        found = await stores.location.read(key)
        assert isinstance(found, Found)
        record = NodeRecord.decode(found.value)
        assert first.node_generation == record.generation
        assert "serving" == record.state
        assert (zl.StableTypeName("member.Room"),) == tuple(record.types)
        watcher = second._tree.membership  # the second host's view of its peers
        assert watcher is not None
        events = watcher.subscribe()
        await next_about(events, first.node_rid, PeerUp)
        assert first.node_generation == second.peers[first.node_rid]
        await first.spots.get_or_create("room", "member.Room").submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.shutdown)
            with trio.fail_after(10):
                await pause.closing.wait()
            changed = await next_about(events, first.node_rid, PeerChanged)
            assert isinstance(changed, PeerChanged)
            assert "draining" == changed.record.state
            during = await stores.location.read(key)
            assert isinstance(during, Found)
            assert "draining" == NodeRecord.decode(during.value).state
            pause.proceed.set()
        assert not isinstance(await stores.location.read(key), Found)
        await next_about(events, first.node_rid, PeerDown)
        assert first.node_rid not in second.peers
        # The second host's transport drops its link to the departed peer (MESH-19).
        remote = second._tree.remote
        assert remote is not None
        assert remote.mesh is not None
        await trio.testing.wait_all_tasks_blocked()  # its own subscriber has seen PeerDown too
        assert first.node_rid not in remote.mesh._sockets.links
        assert second.node_rid not in first.peers  # its membership has ended with it


@pytest.mark.spec("MESH-18")
def test_the_node_lease_is_checked_with_the_config() -> None:
    """node_lease takes a finite number of seconds greater than zero."""
    for bad in (0, -1.0, float("inf"), "10"):
        with pytest.raises(zl.ConfigurationError, match="node_lease"):
            zl.HostConfig(mesh="m", node_lease=bad)  # type: ignore[arg-type]  # bad on purpose
