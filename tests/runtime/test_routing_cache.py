"""When the routing cache forgets an owner (specs/routing.md ROUTE-1).

The cache is internal (``routing/remote.py``), so these tests read it: each forces one of the
reasons to forget and waits, bounded, until the entry is gone. The other reasons are kept from
clearing it first where they would (hints dropped, no store change at all).
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import StoreConfig
from zlink_trio._runtime.host import host as host_module
from zlink_trio._runtime.routing.remote import Owner, Remote

app = zl.Application()


@app.message("cache.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("cache.Answer")
@attrs.frozen
class Answer:
    node_rid: str


@app.message("cache.Note")
@attrs.frozen
class Note:
    text: str


@app.user_spot("cache.Room")
class Room(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.node_rid.value)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass


@asynccontextmanager
async def two_hosts(store_dsn: str) -> AsyncIterator[tuple[zl.Host, zl.Host]]:
    config = zl.HostConfig(mesh=f"c-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as first, zl.open_host(app, config) as second:
        yield first, second


def remote_of(host: zl.Host) -> Remote:
    remote = host._messaging.remote
    assert remote is not None
    return remote


async def cached_route(first: zl.Host, second: zl.Host) -> str:
    """A Spot on ``second`` that ``first`` has reached, so ``first``'s cache names its owner."""
    room = f"room-{uuid.uuid4().hex[:10]}"
    await second.spots.get_or_create(room, "cache.Room").submit()
    reply = await first.route.request_to_spot(room, Ask("warm"), reply_type=Answer).submit()
    assert second.node_rid.value == reply.node_rid
    # The request cached the owner, but a late hint of the create may clear it again; the test
    # needs the entry, so it is set here, as the request set it.
    remote_of(first)._cache[zl.SpotId(room)] = Owner(second.node_rid)
    return room


async def forgotten(remote: Remote, room: str) -> None:
    with trio.fail_after(10):
        while zl.SpotId(room) in remote._cache:  # noqa: ASYNC110  # the reason comes from another host
            await trio.sleep(0.01)


@pytest.mark.spec("ROUTE-1")
async def test_a_store_hint_for_the_key_makes_the_cache_forget_it(store_dsn: str) -> None:
    """The owner closes the Spot: its record's deletion reaches the caller as a change hint, and
    the caller's cache forgets the owner without a call being made."""
    async with two_hosts(store_dsn) as (first, second):
        room = await cached_route(first, second)
        created = await second.spots.get_or_create(room, "cache.Room").submit()
        assert await second.spots.close(created.spot_ref) is True
        await forgotten(remote_of(first), room)


@pytest.mark.spec("ROUTE-1")
async def test_a_resync_makes_the_cache_forget_everything(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With store notifications off the change feed only says Resync, once per poll: the cache
    forgets its entries although nothing changed."""
    polling = functools.partial(StoreConfig, notifications=False, poll_interval=0.05)
    monkeypatch.setattr(host_module, "StoreConfig", polling)
    async with two_hosts(store_dsn) as (first, second):
        room = f"room-{uuid.uuid4().hex[:10]}"
        await second.spots.get_or_create(room, "cache.Room").submit()
        # A resolve could race the next Resync, so the entry is put in the cache directly.
        remote_of(first)._cache[zl.SpotId(room)] = Owner(second.node_rid)
        await forgotten(remote_of(first), room)


@pytest.mark.spec("ROUTE-1")
async def test_the_owners_node_record_going_away_makes_the_cache_forget_it(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner shuts down; hints for its Spot's record are dropped here, so only its node
    record going away can make the caller forget it, and it does."""
    monkeypatch.setattr(Remote, "_forget_key", lambda self, key: None)
    async with two_hosts(store_dsn) as (first, second):
        room = await cached_route(first, second)
        await second.shutdown()
        await forgotten(remote_of(first), room)


@pytest.mark.spec("ROUTE-1")
async def test_a_failed_route_makes_the_cache_forget_the_owner(store_dsn: str) -> None:
    """A send whose transport reports the route unusable ends UNAVAILABLE and the cache forgets
    the owner, with no store change and the owner still live."""
    async with two_hosts(store_dsn) as (first, second):
        room = await cached_route(first, second)
        mesh = remote_of(first).mesh
        assert mesh is not None

        async def refused(*args: object, **kwargs: object) -> None:
            raise zl.ZLinkError(zl.ErrorKind.UNAVAILABLE, "the route failed (injected)")

        real_send = mesh.send
        mesh.send = refused  # type: ignore[method-assign]  # the injected fault
        try:
            with pytest.raises(zl.ZLinkError) as caught:
                await first.route.send_to_spot(room, Note("x")).submit()
        finally:
            mesh.send = real_send  # type: ignore[method-assign]
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        assert zl.SpotId(room) not in remote_of(first)._cache
        assert second.node_rid in first.peers


async def _hint(remote: Remote, room: str, owner: zl.NodeRid) -> None:
    remote.forget(zl.SpotId(room), flush=True)  # as _follow_store gives a change hint


async def _resync(remote: Remote, room: str, owner: zl.NodeRid) -> None:
    remote._store._feed.publish_resync()  # type: ignore[attr-defined]  # hints may be lost
    await trio.testing.wait_all_tasks_blocked()  # _follow_store has taken it


async def _leaving(remote: Remote, room: str, owner: zl.NodeRid) -> None:
    remote.forget_owner(owner)  # the owner takes its leave (RELOC-78)


@pytest.mark.spec("ROUTE-13", "RELOC-78")
@pytest.mark.parametrize("change", [_hint, _resync, _leaving], ids=["hint", "resync", "leaving"])
@pytest.mark.parametrize("hinted_reads", [1, 2])
async def test_an_owner_read_while_a_hint_for_it_comes_in_is_read_again(
    store_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    hinted_reads: int,
    change: Callable[[Remote, str, zl.NodeRid], Awaitable[None]],
) -> None:
    """The caller reads a Spot's owner; a change hint for the Spot's key (or a resync, or its
    owner's leave-taking) comes in while that read is under way: the owner is read once more,
    and that read is kept. When one comes in during the second read too, the call still gets
    the owner it read, but the cache does not keep it, so the next call reads again. A read
    with nothing coming in meanwhile is kept as before."""
    async with two_hosts(store_dsn) as (first, second):
        room = f"room-{uuid.uuid4().hex[:10]}"
        await second.spots.get_or_create(room, "cache.Room").submit()
        remote = remote_of(first)
        authority = remote._node.authority
        reads: list[trio.Event] = [trio.Event() for _ in range(3)]
        go_on = [trio.Event() for _ in range(3)]
        plain_read = authority.read
        count = 0

        async def held_read(target: zl.SpotId) -> object:
            nonlocal count
            index, count = count, count + 1
            found = await plain_read(target)
            reads[index].set()
            await go_on[index].wait()
            return found

        monkeypatch.setattr(authority, "read", held_read)
        monkeypatch.setattr(Remote, "_forget_key", lambda self, key: None)  # only this test's
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                owners: list[Owner] = []

                async def resolve() -> None:
                    found = await remote.owner_of(zl.SpotId(room), math.inf)
                    assert isinstance(found, Owner)
                    owners.append(found)

                nursery.start_soon(resolve)
                for index in range(2):
                    await reads[index].wait()
                    if index < hinted_reads:
                        await change(remote, room, second.node_rid)
                    go_on[index].set()
                    if index >= hinted_reads:
                        break
            assert [second.node_rid] == [owner.node_rid for owner in owners]
            assert min(hinted_reads + 1, 2) == count
            if hinted_reads == 1:
                assert owners[0] is remote._cache[zl.SpotId(room)]
                return
            assert zl.SpotId(room) not in remote._cache
            # Read again, with nothing coming in meanwhile: kept.
            go_on[2].set()
            again = await remote.owner_of(zl.SpotId(room), math.inf)
            assert again is remote._cache[zl.SpotId(room)]
