"""A send made between a move's commit in the store and the target's handling of
``zlink.RelocateCommit`` is kept (specs/relocation.md RELOC-65). The relocation e2e traffic test
found these cases lost (tests/e2e/test_relocation.py); they are its smallest reproductions.

The source writes the commit, then tells the target. Any host that reads the record in between
(a routing-cache miss, or the store's change hint) sends to the target: a peer's send reaches
the target's reader after its sender's call completed (CMP-4.3), and the target's own send to
an Instance Spot resolves there. Both must wait in the restored unit, which the target admits,
sealed, as soon as it is restored. Here the window is held open by making the source wait
before it sends ``RelocateCommit`` (the target's reader takes it at once when it comes,
RELOC-73).

In-process hosts through internal API, as tests/contract/test_spot_move.py.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.declarations.system import RelocateCommit
from zlink_trio._runtime.host import moving
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()
COUNTER = "window.Counter"
ROOM = "window.Room"


@app.message("window.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("window.Get")
@attrs.frozen
class Get:
    pass


@app.message("window.Total")
@attrs.frozen
class Total:
    value: int
    node: str


class KeepTotal(zl.SpotRelocationAdapter["Tally"]):
    async def capture(self, target: Tally) -> bytes:
        return target.total.to_bytes(8, "big")

    async def restore(self, target: Tally, payload: bytes) -> None:
        target.total = int.from_bytes(payload, "big")


class Tally:
    context: Any

    def __init__(self) -> None:
        self.total = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.total += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Total:
        return Total(self.total, self.context.ref.node_rid.value)


@app.instance_spot(COUNTER, relocation=zl.preserve_state_with(KeepTotal))
class Counter(Tally, zl.InstanceSpot):
    pass


@app.user_spot(ROOM, relocation=zl.preserve_state_with(KeepTotal))
class Room(Tally, NoMembers):
    pass


async def _meet(one: TestHost, *others: TestHost) -> None:
    with trio.fail_after(10):
        for other in others:
            await one.host._tree.membership.wait_for_peer(other.node_rid)  # type: ignore[union-attr]


async def _delivered(sender: TestHost, receiver: TestHost) -> None:
    """Wait until ``receiver``'s reader took everything ``sender`` sent it (the testing kit's
    ledger: testing/hosts.py)."""

    def ledger(host: TestHost) -> Any:
        return host.host._tree.remote.mesh.traffic  # type: ignore[union-attr]

    with trio.fail_after(10):
        sent = ledger(sender).sent[receiver.node_rid]
        while ledger(receiver).received[sender.node_rid] < sent:  # noqa: ASYNC110  # libzmq
            await trio.sleep(0.01)


def _hold_commit(monkeypatch: pytest.MonkeyPatch) -> tuple[trio.Event, trio.Event]:
    """Make the source wait before it tells the target ``RelocateCommit``: the first event is
    set when the commit is written (so the store names the target already), the second lets it
    go on."""
    arrived, go_on = trio.Event(), trio.Event()
    tell = moving.tell_commit

    @functools.wraps(tell)
    async def held(remote: Any, unit: Any, target: Any, commit: RelocateCommit) -> None:
        arrived.set()
        await go_on.wait()
        await tell(remote, unit, target, commit)

    monkeypatch.setattr(moving, "tell_commit", held)
    return arrived, go_on


async def _move_with_a_send_in_the_window(
    dsn: str, sender_is_target: bool, monkeypatch: pytest.MonkeyPatch
) -> Total:
    """Move one Spot holding 1 from ``source`` to ``target`` and send it ``Add(10)`` while the
    target holds the commit: from ``target`` to an Instance Spot, or from a third host to a User
    Spot; the Spot's total after the move."""
    async with (
        open_test_stores(dsn) as stores,
        open_test_host(app, dsn=dsn, stores=stores) as source,
        open_test_host(app, dsn=dsn, stores=stores, mesh=source.mesh) as target,
        # Of another version: no target of the source's planned maintenance.
        open_test_host(
            app, dsn=dsn, stores=stores, mesh=source.mesh, application_version="1"
        ) as peer,
    ):
        await _meet(source, target, peer)
        await _meet(target, source, peer)
        await _meet(peer, source, target)
        if sender_is_target:
            await source.route.send_to_spot("c", Add(1)).instance_spot(COUNTER).submit()
        else:
            await source.spots.get_or_create("c", ROOM).submit()
            await source.route.send_to_spot("c", Add(1)).submit()
        arrived, go_on = _hold_commit(monkeypatch)
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            with trio.fail_after(10):
                await arrived.wait()
            # Acknowledged: the send completed (local admission or the transport's queue).
            if sender_is_target:
                await target.route.send_to_spot("c", Add(10)).instance_spot(COUNTER).submit()
            else:
                await peer.route.send_to_spot("c", Add(10)).submit()
                await _delivered(peer, target)
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        with trio.fail_after(10):
            while True:
                total = await peer.route.request_to_spot("c", Get(), reply_type=Total).submit()
                if total.value >= 11 or total.node == target.node_rid.value:
                    break
        # Let a send still on its way arrive: a request from the same sender follows it.
        sender = target if sender_is_target else peer
        return await sender.route.request_to_spot("c", Get(), reply_type=Total).submit()


@pytest.mark.spec("RELOC-65")
async def test_a_peer_send_between_the_commit_and_its_handling_on_the_target_is_kept(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = await _move_with_a_send_in_the_window(store_dsn, False, monkeypatch)
    assert 11 == total.value, total


@pytest.mark.spec("RELOC-65")
async def test_a_send_of_the_target_between_the_commit_and_its_handling_is_kept(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = await _move_with_a_send_in_the_window(store_dsn, True, monkeypatch)
    assert 11 == total.value, total
