"""What bounds a move's relay queue and its ingress hold, and what does not (specs/errors.md
ERR-5.13..ERR-5.16; specs/decisions.md DEC-5, DEC-8): a Spot held at its seal takes in far more
than any queue bound of its hosts (mailbox or job queue) and loses none of it; what it relays
holds the target's job permits once there; what waits there still obeys its deadline, its
caller's cancellation and the message limit of the host it is relayed to; and the relocation
names are the seeds'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.contract.held_commit import hold_the_commit
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()

MAILBOX = 4
"""The hosts' ``mailbox_limit`` (and so their inbound backlogs, OVL-4): far below what is held."""


@app.message("bounds.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("bounds.Get")
@attrs.frozen
class Get:
    pass


@app.message("bounds.Count")
@attrs.frozen
class Count:
    value: int
    node: str


@app.message("bounds.BigAdd")
@attrs.frozen
class BigAdd:
    data: bytes


@app.message("bounds.BigGet")
@attrs.frozen
class BigGet:
    data: bytes


@app.message("bounds.Finish")
@attrs.frozen
class Finish:
    pass


@app.message("bounds.Block")
@attrs.frozen
class Block:
    pass


blocking = trio.Event()
"""Set by a Counter's ``Block`` turn, which then waits for ``unblock``."""
unblock = trio.Event()


class CounterState(zl.SpotRelocationAdapter["Counter"]):
    async def capture(self, target: Counter) -> bytes:
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Counter, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


@app.instance_spot("bounds.Counter", relocation=zl.preserve_state_with(CounterState))
class Counter(zl.InstanceSpot):
    context: Any

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.packet_handler(BigAdd)
    async def big_add(self, msg: BigAdd) -> None:
        self.value += 1000

    @zl.packet_handler(Block)
    async def block(self, msg: Block) -> None:
        blocking.set()
        await unblock.wait()

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, self.context.ref.node_rid.value)

    @zl.request_handler(BigGet)
    async def big_get(self, req: BigGet) -> Count:
        return Count(self.value, self.context.ref.node_rid.value)


outcomes: list[zl.RelocationReadyOutcome] = []
"""What ``on_relocation_ready_completed`` of a Signalled Spot was told, in order."""
completed = trio.Event()


@app.user_spot(
    "bounds.Signalled",
    coordination=zl.RelocationCoordinationMode.APPLICATION_SIGNALED,
    relocation=zl.recreate_on_relocation(),
)
class Signalled(NoMembers):
    context: Any

    @zl.packet_handler(Finish)
    async def finish(self, msg: Finish) -> None:
        self.context.relocation_ready().defer()

    async def on_relocation_ready_completed(self, completion: zl.RelocationReadyCompletion) -> None:
        outcomes.append(completion.outcome)
        completed.set()


COUNTER = "bounds.Counter"


def _held(host: TestHost, spot_id: str) -> int:
    """How many messages wait in the seal of ``spot_id`` on ``host``."""
    activation = host.host._tree.spots.activations[zl.SpotId(spot_id)]  # type: ignore[union-attr]
    hold = activation.hold
    assert hold is not None  # sealed
    return len(hold.held)


def _parked(host: TestHost) -> list[object]:
    """The targets of the sends from peers that ``host`` parks in a backlog from now on."""
    inbound = host.host._tree.inbound  # type: ignore[union-attr]
    backlogs = inbound.backlogs
    park, parked = backlogs.park, []

    async def recorded(nursery: trio.Nursery, origin: Any, target: Any, *rest: Any) -> None:
        parked.append(target)
        await park(nursery, origin, target, *rest)

    backlogs.park = recorded
    return parked


async def _relocating(nursery: trio.Nursery, source: TestHost) -> Callable[[], zl.RelocationResult]:
    """Start ``source``'s relocation in ``nursery``; the returned function gives its result."""
    results: list[zl.RelocationResult] = []

    async def relocate() -> None:
        results.append(await source.host.relocate(deadline=60.0))

    nursery.start_soon(relocate)
    return lambda: results[0]


@pytest.mark.spec("ERR-5.13", "ERR-5.14", "DEC-5")
@pytest.mark.parametrize(
    "bound",
    [
        "mailbox_limit",
        pytest.param("app_job_queue_size", marks=pytest.mark.spec("ERR-5.16")),
    ],
)
async def test_a_held_move_takes_in_far_more_than_any_queue_bound_and_loses_nothing(
    store_dsn: str, bound: str
) -> None:
    """With the move held at its commit, the source's own callers and a third host send and ask
    ten times what a mailbox or backlog of these hosts holds, or their shared job queue: every
    send is admitted at once into the seal, nothing is refused, and after the move the target
    has handled every send and answered every request."""
    sends, requests = 10 * MAILBOX, MAILBOX
    bounded = {bound: MAILBOX}
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, **bounded) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh, **bounded) as target,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh, **bounded) as caller,
    ):
        await meet(source, target)
        await meet(caller, source)
        await source.route.send_to_spot("c-1", Add(1)).instance_spot(COUNTER).submit()
        parked = _parked(source)
        answers: list[Count] = []
        refused: list[zl.ZLinkError] = []
        reached, release = hold_the_commit(source)
        async with trio.open_nursery() as nursery:
            result = await _relocating(nursery, source)
            with trio.fail_after(20):
                await reached.wait()

            async def ask(host: TestHost) -> None:
                call = host.route.request_to_spot("c-1", Get(), reply_type=Count)
                try:
                    answers.append(await call.instance_spot(COUNTER).timeout(60).submit())
                except zl.ZLinkError as error:
                    refused.append(error)

            async def send_then_ask(host: TestHost) -> None:
                # A send's wait for room is not its caller's (CMP-7.5): one that waited here
                # would end only with the move; so they run beside the check below. The
                # requests come right behind the sends: none may find them waiting for room.
                for _ in range(sends):
                    await host.route.send_to_spot("c-1", Add(1)).instance_spot(COUNTER).submit()
                for _ in range(requests):
                    nursery.start_soon(ask, host)

            try:
                for host in (source, caller):
                    nursery.start_soon(send_then_ask, host)
                held = 2 * (sends + requests)
                with trio.fail_after(20):
                    while _held(source, "c-1") < held:  # noqa: ASYNC110  # the third host's messages come through libzmq's thread
                        await trio.sleep(0.01)
                assert held == _held(source, "c-1")
                assert [] == refused
                assert [] == parked  # none waited for room or a job permit in a backlog
            finally:
                release.set()
        assert zl.RelocationOutcome.RELOCATED == result().outcome, result()
        assert [] == refused
        moved_to = target.node_rid.value
        assert [moved_to] * (2 * requests) == [answer.node for answer in answers]
        count = await target.route.request_to_spot("c-1", Get(), reply_type=Count).submit()
        assert Count(1 + 2 * sends, moved_to) == count


@pytest.mark.spec("ERR-5.14", "RELOC-65")
async def test_a_unit_restored_on_its_target_takes_in_any_amount_before_it_opens(
    store_dsn: str,
) -> None:
    """With the move held at its commit, the unit restored and admitted on the target, the
    target's own callers send ten times its ``mailbox_limit`` and ask as many requests as the
    limit: all wait in the unit, none refused, and once the move goes on the target handles
    every send and answers every request."""
    sends, requests = 10 * MAILBOX, MAILBOX
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, mailbox_limit=MAILBOX
        ) as target,
    ):
        await meet(source, target)
        await source.route.send_to_spot("c-5", Add(1)).instance_spot(COUNTER).submit()
        answers: list[Count] = []
        refused: list[zl.ZLinkError] = []
        reached, release = hold_the_commit(source)
        async with trio.open_nursery() as nursery:
            result = await _relocating(nursery, source)

            async def ask() -> None:
                call = target.route.request_to_spot("c-5", Get(), reply_type=Count)
                try:
                    answers.append(await call.instance_spot(COUNTER).timeout(60).submit())
                except zl.ZLinkError as error:
                    refused.append(error)

            async def send_then_ask() -> None:  # beside the check, as in the tests above
                for _ in range(sends):
                    await target.route.send_to_spot("c-5", Add(1)).instance_spot(COUNTER).submit()
                for _ in range(requests):
                    nursery.start_soon(ask)

            try:
                with trio.fail_after(20):
                    await reached.wait()
                    nursery.start_soon(send_then_ask)
                    while _held(target, "c-5") < sends + requests:  # noqa: ASYNC110  # the calls run in their tasks
                        await trio.sleep(0.01)
                assert [] == refused
            finally:
                release.set()
        assert zl.RelocationOutcome.RELOCATED == result().outcome, result()
        assert [] == refused
        moved_to = target.node_rid.value
        assert [moved_to] * requests == [answer.node for answer in answers]
        count = await target.route.request_to_spot("c-5", Get(), reply_type=Count).submit()
        assert Count(1 + sends, moved_to) == count


@pytest.mark.spec("ERR-5.16")
async def test_what_a_move_relays_holds_the_targets_job_permits(store_dsn: str) -> None:
    """Both hosts have ``MAILBOX`` job permits. With the move held at its commit, the source takes
    a ``Block`` and three times its permits in sends into the hold. On the target the Counter runs
    the ``Block`` first; while it blocks, the sends relayed behind it hold the target's permits:
    a request to another Spot of the target gets none until the ``Block`` ends, then it and
    every send are handled."""
    global blocking, unblock
    blocking, unblock = trio.Event(), trio.Event()
    sends = 3 * MAILBOX
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, app_job_queue_size=MAILBOX) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, app_job_queue_size=MAILBOX
        ) as target,
    ):
        await meet(source, target)
        await source.route.send_to_spot("c-4", Add(1)).instance_spot(COUNTER).submit()
        await target.route.send_to_spot("other", Add(1)).instance_spot(COUNTER).submit()
        reached, release = hold_the_commit(source)
        async with trio.open_nursery() as nursery:
            result = await _relocating(nursery, source)
            with trio.fail_after(20):
                await reached.wait()

            async def send_all() -> None:  # beside the check, as in the test above
                sender = source.route
                await sender.send_to_spot("c-4", Block()).instance_spot(COUNTER).submit()
                for _ in range(sends):
                    await sender.send_to_spot("c-4", Add(1)).instance_spot(COUNTER).submit()

            try:
                nursery.start_soon(send_all)
                with trio.fail_after(20):
                    while _held(source, "c-4") < 1 + sends:  # noqa: ASYNC110  # the sends run in their task
                        await trio.sleep(0.01)
            finally:
                release.set()
        assert zl.RelocationOutcome.RELOCATED == result().outcome, result()
        try:
            with trio.fail_after(20):
                await blocking.wait()
            ask = target.route.request_to_spot("other", Get(), reply_type=Count)
            with pytest.raises(zl.ZLinkError) as waited:
                await ask.instance_spot(COUNTER).timeout(0.5).submit()
            assert zl.ErrorKind.DEADLINE_EXCEEDED == waited.value.kind
        finally:
            unblock.set()
        with trio.fail_after(20):
            ask = target.route.request_to_spot("other", Get(), reply_type=Count)
            assert Count(1, target.node_rid.value) == await ask.instance_spot(COUNTER).submit()
            count = target.route.request_to_spot("c-4", Get(), reply_type=Count)
            assert Count(1 + sends, target.node_rid.value) == await count.submit()


@pytest.mark.spec("ERR-5.15")
async def test_what_waits_at_a_seal_keeps_its_deadline_cancellation_and_message_limit(
    store_dsn: str,
) -> None:
    """With the move held at its commit, a request with a short timeout ends DEADLINE_EXCEEDED
    and one whose caller gives up ends in its cancellation, both while the Spot is still sealed;
    a request and a send within the source's message limit but over the target's are refused
    when relayed (the request PROTOCOL_ERROR), and a small send behind them is handled there."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, max_message_bytes=1024
        ) as target,
    ):
        await meet(source, target)
        await source.route.send_to_spot("c-2", Add(1)).instance_spot(COUNTER).submit()
        big = bytes(100_000)  # over the target's limit with any frame headroom
        outcomes_of_big: list[zl.ErrorKind | Count] = []
        reached, release = hold_the_commit(source)
        async with trio.open_nursery() as nursery:
            result = await _relocating(nursery, source)
            with trio.fail_after(20):
                await reached.wait()
            get = source.route.request_to_spot("c-2", Get(), reply_type=Count)
            with trio.fail_after(10), pytest.raises(zl.ZLinkError) as late:
                await get.instance_spot(COUNTER).timeout(0.5).submit()
            assert zl.ErrorKind.DEADLINE_EXCEEDED == late.value.kind
            with trio.fail_after(10), trio.move_on_after(0.3) as gave_up:
                call = source.route.request_to_spot("c-2", Get(), reply_type=Count)
                await call.instance_spot(COUNTER).timeout(60).submit()
            assert gave_up.cancelled_caught
            assert not release.is_set()  # both ended while the Spot was sealed

            async def ask_big() -> None:
                call = source.route.request_to_spot("c-2", BigGet(big), reply_type=Count)
                try:
                    outcomes_of_big.append(await call.instance_spot(COUNTER).timeout(30).submit())
                except zl.ZLinkError as error:
                    outcomes_of_big.append(error.kind)

            nursery.start_soon(ask_big)
            await source.route.send_to_spot("c-2", BigAdd(big)).instance_spot(COUNTER).submit()
            await source.route.send_to_spot("c-2", Add(1)).instance_spot(COUNTER).submit()
            with trio.fail_after(10):
                while _held(source, "c-2") < 5:  # noqa: ASYNC110  # ask_big offers its request once its task runs
                    await trio.sleep(0.01)
            release.set()
        assert zl.RelocationOutcome.RELOCATED == result().outcome, result()
        assert [zl.ErrorKind.PROTOCOL_ERROR] == outcomes_of_big
        count = await target.route.request_to_spot("c-2", Get(), reply_type=Count).submit()
        assert Count(2, target.node_rid.value) == count


@pytest.mark.spec("DEC-8")
async def test_the_relocation_names_are_the_seeds(store_dsn: str) -> None:
    """The coordination modes are FRAMEWORK_MANAGED and APPLICATION_SIGNALED, and an
    APPLICATION_SIGNALED Spot signals its boundary with ``relocation_ready().defer()``, told
    CONTINUED when nothing moves it."""
    global completed
    completed = trio.Event()
    outcomes.clear()
    assert ["FRAMEWORK_MANAGED", "APPLICATION_SIGNALED"] == [
        mode.name for mode in zl.RelocationCoordinationMode
    ]
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("s-1", "bounds.Signalled").submit()
        await host.route.send_to_spot("s-1", Finish()).submit()
        with trio.fail_after(10):
            await completed.wait()
    assert [zl.RelocationReadyOutcome.CONTINUED] == outcomes
