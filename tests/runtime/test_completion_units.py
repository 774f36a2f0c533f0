"""A call's wait and the completion lane when the completion and the wait do not meet in the
usual order (engines/completion.py, Rules 2 and 6): the completion runs before anyone waits, or
after the waiter gave up, or after a cancelled waiter took the winner's outcome. Each time the
lane runs the completion quietly: nothing is rescheduled twice and nothing is logged.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from zlink_trio._runtime.engines.completion import LANE_BATCH, CompletionDispatcher, Outcome


@pytest.fixture
def lane_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """What the lane logs. Enabled by hand: import-linter's CLI, run in this process by another
    test, configures logging with every existing logger disabled."""
    logging.getLogger("zlink_trio.runtime.completion").disabled = False
    caplog.set_level(logging.DEBUG, logger="zlink_trio.runtime.completion")
    return caplog


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.spec("CMP-10.1")
async def test_a_completion_that_runs_before_its_caller_waits_is_kept_for_it(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    """The lane completes an entry nobody waits on yet: the outcome waits for the caller, who
    gets it without blocking."""
    dispatcher = CompletionDispatcher()
    entry = dispatcher.register()
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        popped = dispatcher.pop(entry.route)
        assert popped is entry
        dispatcher.deliver(entry, Outcome(value="early"))
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):
            assert "early" == (await entry.wait()).unwrap()
        dispatcher.close()
    assert [] == errors(lane_log)


@pytest.mark.spec("CMP-9.10")
async def test_a_completion_after_its_waiter_was_cancelled_runs_quietly(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    """A wait without a claim ends at once when cancelled; the completion delivered later finds
    no waiter and runs without error."""
    dispatcher = CompletionDispatcher()
    entry = dispatcher.register()
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        with trio.move_on_after(0.01) as scope:
            await entry.wait()
        assert scope.cancelled_caught
        popped = dispatcher.pop(entry.route)
        assert popped is entry
        dispatcher.deliver(entry, Outcome(value="late"))
        await trio.testing.wait_all_tasks_blocked()
        dispatcher.close()
    assert [] == errors(lane_log)


@pytest.mark.spec("CMP-9.1", "CMP-17.7")
async def test_a_cancelled_caller_takes_the_winners_outcome_and_the_lane_runs_it_quietly(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    """Another path won the slot and queued its completion; the caller is cancelled before the
    lane ran it: the caller's claim fails, it gets the winner's outcome, and the completion the
    lane runs afterwards wakes nobody and logs nothing."""
    dispatcher = CompletionDispatcher()
    entry = dispatcher.register()
    got: list[object] = []

    def claim() -> bool:
        return dispatcher.pop(entry.route) is entry

    async def caller(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            got.append((await entry.wait(claim)).unwrap())

    async with trio.open_nursery() as nursery:
        scope = await nursery.start(caller)
        await trio.testing.wait_all_tasks_blocked()
        popped = dispatcher.pop(entry.route)  # the reply wins the slot; the lane is not running
        assert popped is entry
        dispatcher.deliver(entry, Outcome(value="winner"))
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert ["winner"] == got
        await nursery.start(dispatcher.run)
        await trio.testing.wait_all_tasks_blocked()
        dispatcher.close()
    assert [] == errors(lane_log)


class Steps(trio.abc.Instrument):
    """Counts task steps: two callbacks that see the same count ran in one step of the lane."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


async def test_the_lane_runs_what_is_queued_in_turns_of_lane_batch_and_stays_ready(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    """Completions already queued run in turns of LANE_BATCH, one step each, so a long queue
    never keeps the lane from its checkpoint; all of them run, in order, and the lane then
    waits for more and runs what comes later."""
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    dispatcher = CompletionDispatcher()
    ran: list[tuple[int, int]] = []
    queued = 2 * LANE_BATCH + 1
    try:
        for n in range(queued):
            dispatcher.enqueue(lambda n=n: ran.append((n, steps.count)))
        async with trio.open_nursery() as nursery:
            await nursery.start(dispatcher.run)
            await trio.testing.wait_all_tasks_blocked()
            assert list(range(queued)) == [n for n, _ in ran]
            turns = [
                len([n for n, step in ran if step == turn]) for turn in sorted({s for _, s in ran})
            ]
            assert [LANE_BATCH, LANE_BATCH, 1] == turns
            dispatcher.enqueue(lambda: ran.append((queued, steps.count)))
            await trio.testing.wait_all_tasks_blocked()
            assert queued == ran[-1][0]
            dispatcher.close()
            with trio.fail_after(1):
                await dispatcher.wait_drained()
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert [] == errors(lane_log)


@pytest.mark.spec("CMP-11.9")
async def test_a_raising_completion_is_logged_with_its_traceback(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    dispatcher = CompletionDispatcher()

    def boom() -> None:
        raise RuntimeError("bad callback")

    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        dispatcher.enqueue(boom)
        dispatcher.close()
        await dispatcher.wait_drained()
    [record] = [r for r in lane_log.records if r.levelno >= logging.ERROR]
    assert "a completion callback raised; the lane goes on" == record.getMessage()
    assert record.exc_info is not None
    assert "bad callback" == str(record.exc_info[1])


@pytest.mark.spec("SHUT-4.4")
async def test_a_completion_after_the_final_drain_is_dropped_and_noted(
    lane_log: pytest.LogCaptureFixture,
) -> None:
    """Once the lane is closed a completion is not run; it is noted at debug level only."""
    dispatcher = CompletionDispatcher()
    ran: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        dispatcher.close()
        await dispatcher.wait_drained()
    dispatcher.enqueue(lambda: ran.append(1))
    assert [] == ran
    assert [(logging.DEBUG, "completion after the dispatcher closed was dropped")] == [
        (r.levelno, r.getMessage()) for r in lane_log.records
    ]
