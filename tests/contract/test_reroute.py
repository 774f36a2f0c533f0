"""Per-sender order when a sender's route to a Spot changes after a move (specs/relocation.md
RELOC-70; routing/reroute.py): a send that reached the old owner after the commit is relayed
from there, and the same sender's next call, which goes to the new owner directly, waits until
that relay has reached the new owner."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("reroute.Note")
@attrs.frozen
class Note:
    seq: int


@app.message("reroute.Ask")
@attrs.frozen
class Ask:
    pass


@app.message("reroute.Seen")
@attrs.frozen
class Seen:
    node: str


handled: list[tuple[str, str]] = []
"""(what, host) of every message the Room handled, in order."""


@app.user_spot("reroute.Room", relocation=zl.recreate_on_relocation())
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        handled.append((f"note {msg.seq}", self.context.ref.node_rid.value))

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Seen:
        node = self.context.ref.node_rid.value
        handled.append(("ask", node))
        return Seen(node)


def _tree(host: TestHost) -> Any:
    return host.host._tree


@pytest.mark.spec("RELOC-70", "RELOC-79")
@pytest.mark.parametrize("sending", ["third host", "new owner"])
async def test_a_senders_next_call_waits_for_its_send_relayed_by_the_old_owner(
    store_dsn: str, sending: str
) -> None:
    """The Room moves from O to T. The sender S (a third host, or T itself) learns the move
    (its routing cache forgets O), and a send of S still reaches O (it was on its way: sent
    here on S's connection to O), where the relay to T is held back (an injected delay). S's
    next request to the Room, which goes to T (over the wire, or on T itself), does not reach
    the Room while the relay is held, and once it goes on, the Room handles the relayed send
    first."""
    handled.clear()
    room = zl.SpotId("room")
    release = trio.Event()
    forgot = trio.Event()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as old,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=old.mesh) as sender,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=old.mesh, application_version="2"
        ) as new,
    ):
        with trio.fail_after(10):
            for one in (old, sender, new):
                for other in (old, sender, new):
                    if one is not other:
                        await _tree(one).membership.wait_for_peer(other.node_rid)
        await old.spots.get_or_create("room", "reroute.Room").submit()
        if sending == "new owner":
            sender = new
        await sender.route.send_to_spot("room", Note(0)).submit()
        sender_remote = _tree(sender).remote
        remembered = sender_remote.forgotten

        def forgotten(target: object, owner: object) -> None:
            remembered(target, owner)
            if target == room:
                forgot.set()

        sender_remote.forgotten = forgotten
        moved = await old.host.relocate(
            mode=zl.RelocationMode.ROLLING_UPDATE, target_version="2", deadline=20.0
        )
        assert zl.RelocationOutcome.RELOCATED == moved.outcome, moved
        relays = old.host.follow_relays
        old_remote = _tree(old).remote
        relay_send = old_remote.send_as_is  # what every send of the old owner goes through

        async def held_send(owner: Owner, send: Any) -> None:
            if send.target == room:  # the injected delay: the old owner's relay is slow
                await release.wait()
            await relay_send(owner, send)

        old_remote.send_as_is = held_send
        asked: list[Seen] = []
        with trio.fail_after(15):
            await forgot.wait()
            # A send still on its way to the old owner (its sender had not learned the move).
            await sender_remote.send(Owner(old.node_rid), room, Note(1), {}, None)
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    call = sender.route.request_to_spot("room", Ask(), reply_type=Seen)
                    asked.append(await call.submit())

                nursery.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                assert not asked, "the request overtook the send relayed by the old owner"
                release.set()
        there = new.node_rid.value
        assert [Seen(there)] == asked
        assert [("note 1", there), ("ask", there)] == handled[-2:]
        # The old owner relayed the send; the sender's flush is no call (RELOC-79).
        assert relays + 1 == old.host.follow_relays
