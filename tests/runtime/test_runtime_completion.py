"""The in-flight call table and the completion lane (specs/completion.md CMP-10.x, CMP-11.x)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from zlink_trio._runtime.engines.completion import CompletionDispatcher, Outcome, shutting_down
from zlink_trio.errors import ErrorKind, ZLinkError


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


@pytest.mark.spec("CMP-11.2", "CMP-17.15", "CMP-11.3", "CMP-11.1")
async def test_a_completion_runs_in_a_fresh_turn_not_on_the_settling_stack() -> None:
    """deliver() returns before the completion runs; the lane runs it afterwards."""
    dispatcher = CompletionDispatcher()
    ran: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        entry = dispatcher.register()
        won = dispatcher.pop(entry.route)
        assert won is entry
        dispatcher.deliver(won, Outcome(value="reply"))
        dispatcher.enqueue(lambda: ran.append("callback"))
        assert [] == ran  # nothing ran on the settling path's stack
        with trio.fail_after(5):
            assert "reply" == (await entry.wait()).unwrap()
        await trio.testing.wait_all_tasks_blocked()
        assert ["callback"] == ran
        dispatcher.close()


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
    entries = [dispatcher.register() for _ in range(1000)]
    settled = dispatcher.settle_all(shutting_down())
    assert 1000 == settled
    assert 0 == dispatcher.in_flight
    assert 0 == dispatcher.settle_all(shutting_down())  # nothing left to deliver twice
    dispatcher.close()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.run)
        await dispatcher.wait_drained()
    for entry in entries:
        with pytest.raises(ZLinkError) as caught:
            (await entry.wait()).unwrap()
        assert ErrorKind.SHUTTING_DOWN == caught.value.kind
