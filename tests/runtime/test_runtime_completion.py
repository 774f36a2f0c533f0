"""The in-flight call table and the completion lane (specs/completion.md CMP-10.x, CMP-11.x)."""

from __future__ import annotations

import inspect
import logging
import math

import pytest
import trio
import trio.testing

from zlink_trio._integration.transport.pending import PendingReplies
from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.registry import Handler
from zlink_trio._runtime.engines.completion import CompletionDispatcher, Outcome, shutting_down
from zlink_trio._runtime.node.envelope import reply
from zlink_trio._wire import OperationId, Reply
from zlink_trio._wire.ids import U64_MAX, ReplyRouteId
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

HANDLER = Handler(HandlerKind.REQUEST, "ask", object, str, False)


@pytest.mark.spec("CMP-10.1", "CMP-10.2", "CMP-17.14")
def test_only_the_first_pop_wins_the_slot() -> None:
    """Reply, timeout, cancellation and shutdown all pop the same entry; only the first gets it."""
    dispatcher = CompletionDispatcher()
    entry = dispatcher.register()
    assert entry is dispatcher.pop(entry.route)
    for _ in range(3):
        assert dispatcher.pop(entry.route) is None
    assert 0 == dispatcher.in_flight


@pytest.mark.spec("CMP-10.8", "CMP-10.7")
def test_entries_are_registered_with_distinct_routes_before_submission() -> None:
    """register() puts the entry in the table at once, each under its own ReplyRouteId."""
    dispatcher = CompletionDispatcher()
    entries = [dispatcher.register() for _ in range(100)]
    assert 100 == dispatcher.in_flight
    assert 100 == len({entry.route for entry in entries})


@pytest.mark.spec("CMP-10.7")
def test_routes_count_up_from_one_and_wrap_past_the_u64_range_to_one() -> None:
    """Routes are 1, 2, 3, ... within a node run; after ``U64_MAX`` the next is 1 again, never 0
    and never outside the u64 range (completion.py ``register``)."""
    dispatcher = CompletionDispatcher()
    assert [1, 2, 3] == [dispatcher.register().route.value for _ in range(3)]
    dispatcher._last_route = U64_MAX - 1  # where 2**64 - 2 calls would have left it
    assert [U64_MAX, 1, 2] == [dispatcher.register().route.value for _ in range(3)]


@pytest.mark.spec("CMP-11.2", "CMP-17.15", "CMP-11.3", "CMP-11.1")
async def test_a_completion_runs_in_a_fresh_turn_not_on_the_settling_stack() -> None:
    """The reply path (node/envelope.py ``reply``) settles the slot and returns before the
    completion runs; the lane runs it afterwards, in its own task, with nothing of the settling
    path on its stack."""
    dispatcher = CompletionDispatcher()
    ran: list[tuple[str, bool, bool]] = []
    settling = False

    def completion(outcome: Outcome) -> None:
        on_stack = any(frame.function == "reply" for frame in inspect.stack())
        ran.append((str(outcome.unwrap()), settling, on_stack))

    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        entry = dispatcher.register(completion)
        settling = True
        reply(dispatcher, entry.route, HANDLER, "reply", "spot")
        assert 0 == dispatcher.in_flight  # settled: the slot is taken ...
        assert [] == ran  # ... and nothing ran on the settling path's stack
        settling = False
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()
        assert [("reply", False, False)] == ran
        dispatcher.close()


@pytest.mark.spec("CMP-11.2", "CMP-11.1", "DEC-27")
async def test_an_awaited_request_resumes_its_caller_after_the_settling_path_without_the_lane() -> (
    None
):
    """With no lane running, the reply path settles an awaited entry and returns before its
    caller resumes; the caller then resumes in its own task, and nothing waits on the lane."""
    dispatcher = CompletionDispatcher()  # its lane never runs in this test
    entry = dispatcher.register()
    resumed: list[tuple[object, bool]] = []
    settling = False

    async def caller() -> None:
        outcome = await entry.wait()
        resumed.append((outcome.unwrap(), settling))

    with trio.fail_after(5):  # a completion left on the lane would never wake the caller
        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            settling = True
            reply(dispatcher, entry.route, HANDLER, "reply", "spot")
            assert [] == resumed  # nothing of the caller ran on the settling stack
            settling = False
            assert 0 == dispatcher.queued
    assert [("reply", False)] == resumed


@pytest.mark.spec("CMP-11.9")
async def test_a_raising_completion_does_not_stop_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception in one completion is logged and the following ones still run."""
    dispatcher = CompletionDispatcher()
    ran: list[int] = []
    # Listen on the lane's own logger, and enable it: import-linter's CLI, which test_layers
    # runs in this process, configures logging with every existing logger disabled.
    lane_log = logging.getLogger("zlink_trio.runtime.completion")
    lane_log.disabled = False
    lane_log.addHandler(caplog.handler)

    def boom() -> None:
        raise RuntimeError("one bad callback")

    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        dispatcher.enqueue(lambda: ran.append(1))
        dispatcher.enqueue(boom)
        dispatcher.enqueue(lambda: ran.append(2))
        dispatcher.close()
        with trio.fail_after(5):
            await dispatcher.wait_drained()
    lane_log.removeHandler(caplog.handler)
    assert [1, 2] == ran
    assert any(record.exc_info is not None for record in caplog.records)


@pytest.mark.spec("CMP-11.8", "CMP-11.4", "CMP-11.5")
async def test_close_drains_everything_accepted(autojump_clock: trio.abc.Clock) -> None:
    """Completions accepted before close() all run before the lane ends; enqueueing never
    blocks, and the lane never holds more completions than calls were popped."""
    dispatcher = CompletionDispatcher()
    entries = [dispatcher.register() for _ in range(500)]
    ran: list[Outcome] = []
    for _ in range(500):
        dispatcher.register(ran.append)
    settled = dispatcher.settle_all(shutting_down())
    assert 1000 == settled
    assert 0 == dispatcher.in_flight
    assert 0 == dispatcher.settle_all(shutting_down())  # nothing left to deliver twice
    dispatcher.close()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.run)
        with trio.fail_after(5):  # a completion dropped for lack of room would never come
            await dispatcher.wait_drained()
            for entry in entries:
                with pytest.raises(ZLinkError) as caught:
                    (await entry.wait()).unwrap()
                assert ErrorKind.SHUTTING_DOWN == caught.value.kind
    # One completion per settled call ran, no more (CMP-11.5).
    assert 500 == len(ran)
    assert {ErrorKind.SHUTTING_DOWN} == {outcome.error.kind for outcome in ran if outcome.error}


@pytest.mark.spec("CMP-17.15", "CMP-11.2")
async def test_a_remote_reply_resumes_its_caller_in_a_new_turn() -> None:
    """A request to a remote owner is settled by the transport's pending-reply table: the reader
    that pops the entry only reschedules the parked caller, which resumes after the reader's
    code has returned, never on its stack."""
    table = PendingReplies()
    route, entry = table.register(PeerRun(NodeRid("owner"), NodeGeneration(1)), math.inf)
    resumed: list[tuple[bytes, bool]] = []
    reading = False

    async def caller() -> None:
        await entry.wait()
        assert isinstance(entry.outcome, Reply)
        resumed.append((entry.outcome.payload, reading))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        answer = Reply(
            ReplyRouteId(route), OperationId.new(), NodeGeneration(1), StableTypeName("a"), b"r"
        )
        reading = True
        assert table.complete(answer)  # the reader settles the request ...
        assert [] == resumed  # ... and the caller has not run on its stack
        reading = False
    assert [(b"r", False)] == resumed


async def test_a_callback_entry_completes_on_the_lane_and_has_no_waiter() -> None:
    """An entry registered with a callback (completion.py Rule 5) is completed by running the
    callback with its outcome on the lane, never on the settling stack; it has no waiter."""
    dispatcher = CompletionDispatcher()
    outcomes: list[Outcome] = []
    entry = dispatcher.register(outcomes.append)
    with pytest.raises(TypeError) as caught:
        await entry.wait()
    assert "an entry registered with a callback has no waiter" == str(caught.value)
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        won = dispatcher.pop(entry.route)
        assert won is entry
        dispatcher.deliver(won, Outcome(value="reply"))
        assert [] == outcomes
        dispatcher.close()
        with trio.fail_after(5):
            await dispatcher.wait_drained()
    assert [Outcome(value="reply")] == outcomes
