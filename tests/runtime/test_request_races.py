"""A request's one result when its reply races its timeout or its caller's cancellation
(specs/completion.md CMP-9.3, CMP-10.1, CMP-10.2, CMP-17.14; CMP-9.1 and CMP-17.7, which the
runtime breaks when a cancellation comes after a reply has won the slot).

Each test forces one interleaving of the real settling code (``routing/local.py`` ``reply_of``,
``node/envelope.py`` ``reply``, the completion dispatcher) on a clock the test moves itself: the
completion lane starts only when the test lets it, so "the reply won the slot, but its completion
has not run yet" is a state the test holds while the deadline passes or the caller is cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import attrs
import pytest
import trio
import trio.testing

from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.registry import Handler
from zlink_trio._runtime.engines.clock import TRIO_CLOCK
from zlink_trio._runtime.engines.completion import CompletionDispatcher, shutting_down
from zlink_trio._runtime.node.envelope import reply
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.local import reply_of
from zlink_trio.errors import ErrorKind, ZLinkError

DEADLINE = 10.0


@attrs.frozen
class Ask:
    text: str


@attrs.frozen
class Answer:
    text: str


HANDLER = Handler(HandlerKind.REQUEST, "ask", Ask, Answer, False)


class Node:
    """The parts of a ``LocalNode`` that settling a request uses."""

    def __init__(self) -> None:
        self.dispatcher = CompletionDispatcher()
        self.clock = TRIO_CLOCK


class Caller:
    """One request waiting in ``reply_of``; records what it observed."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.entry = node.dispatcher.register()
        self.observed: list[object] = []
        self.scope = trio.CancelScope()
        self.done = trio.Event()

    async def run(self) -> None:
        try:
            with self.scope:
                try:
                    value = await reply_of(
                        cast(LocalNode, self.node), self.entry, DEADLINE, Answer, copy=False
                    )
                except ZLinkError as error:
                    self.observed.append(error.kind)
                except trio.Cancelled:
                    self.observed.append("cancelled")
                    raise
                else:
                    self.observed.append(value)
        finally:
            self.done.set()

    def answer(self, text: str) -> None:
        """The Spot's handler returns: the reply path settles (or finds the slot taken)."""
        reply(self.node.dispatcher, self.entry.route, HANDLER, Answer(text), "spot")


class Race:
    """A nursery for the caller whose completion lane runs only once the test starts it. On the
    way out the lane always runs and whatever is still in flight is settled, so a failing
    assertion ends the test instead of leaving the caller waiting for ever."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.lane_started = False

    async def run_lane(self, caller: Caller) -> None:
        """Start the completion lane and wait until the caller has its result."""
        self.start_lane()
        await caller.done.wait()

    def start_lane(self) -> None:
        if not self.lane_started:
            self.lane_started = True
            self.nursery.start_soon(self.node.dispatcher.run)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[trio.Nursery]:
        async with trio.open_nursery() as self.nursery:
            try:
                yield self.nursery
            finally:
                dispatcher = self.node.dispatcher
                dispatcher.settle_all(shutting_down())
                self.start_lane()
                dispatcher.close()
                await dispatcher.wait_drained()


@pytest.mark.spec("CMP-10.1", "CMP-10.2", "CMP-17.14")
async def test_a_reply_that_won_the_slot_is_not_replaced_by_the_deadline(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The reply takes the slot; the deadline passes before its completion has run. The timeout
    path finds the slot taken and does nothing: the caller gets the reply, once."""
    node = Node()
    caller = Caller(node)
    race = Race(node)
    async with race.running() as nursery:
        nursery.start_soon(caller.run)
        await trio.testing.wait_all_tasks_blocked()
        caller.answer("first")  # the reply wins the slot; the lane is not running yet
        assert 0 == node.dispatcher.in_flight
        mock_clock.jump(DEADLINE)  # the deadline passes before the reply's completion runs
        await trio.testing.wait_all_tasks_blocked()
        # The timeout path lost the slot: the caller's wait ends with the winner's outcome
        # (completion.py Rule 6), without waiting for the lane.
        assert [Answer("first")] == caller.observed
        await race.run_lane(caller)
    assert [Answer("first")] == caller.observed


@pytest.mark.spec("CMP-9.3", "CMP-10.1", "CMP-10.2")
async def test_a_reply_after_the_deadline_won_is_discarded(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The deadline takes the slot first; the reply that comes before the timeout's completion
    has run finds the slot taken: the caller gets DEADLINE_EXCEEDED, only the entry is gone."""
    node = Node()
    caller = Caller(node)
    race = Race(node)
    async with race.running() as nursery:
        nursery.start_soon(caller.run)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(DEADLINE)
        await trio.testing.wait_all_tasks_blocked()
        assert 0 == node.dispatcher.in_flight  # the timeout took the entry out at once
        caller.answer("late")  # before the timeout's completion has run
        await race.run_lane(caller)
    assert [ErrorKind.DEADLINE_EXCEEDED] == caller.observed


@pytest.mark.spec("CMP-9.3", "CMP-10.1", "CMP-10.2")
async def test_a_reply_after_the_caller_was_cancelled_is_discarded(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The caller's cancel scope ends the wait first: the caller sees trio.Cancelled, the entry
    leaves the table at once, and the reply that comes later completes nothing."""
    node = Node()
    caller = Caller(node)
    completed: list[object] = []
    race = Race(node)
    async with race.running() as nursery:
        nursery.start_soon(caller.run)
        await trio.testing.wait_all_tasks_blocked()
        caller.scope.cancel()
        await caller.done.wait()
        assert ["cancelled"] == caller.observed
        assert 0 == node.dispatcher.in_flight  # bookkeeping cleaned up when the caller left
        node.dispatcher.deliver = lambda entry, outcome: completed.append(outcome)  # type: ignore[method-assign]  # a spy
        caller.answer("late")
        race.start_lane()
        await trio.testing.wait_all_tasks_blocked()
    assert [] == completed  # the late reply was discarded, not delivered


@pytest.mark.spec("CMP-10.1", "CMP-17.14")
async def test_a_reply_delivered_before_the_cancellation_is_what_the_caller_gets(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The reply's completion has run (the caller is woken, not yet resumed) when its scope is
    cancelled: the caller still gets the reply, not trio.Cancelled."""
    node = Node()
    caller = Caller(node)
    race = Race(node)
    async with race.running() as nursery:
        nursery.start_soon(caller.run)
        await trio.testing.wait_all_tasks_blocked()
        caller.answer("first")
        # The lane runs the cancellation right after the reply's completion, in the same batch,
        # so the caller is woken with its reply before its scope is cancelled.
        node.dispatcher.enqueue(caller.scope.cancel)
        await race.run_lane(caller)
    assert [Answer("first")] == caller.observed


@pytest.mark.spec("CMP-9.1", "CMP-17.7")
async def test_a_reply_that_won_the_slot_is_not_replaced_by_a_later_cancellation(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The reply takes the slot; the caller's scope is cancelled before the reply's completion
    has run. The reply settled first, so it is the result the caller observes (CMP-9.1)."""
    node = Node()
    caller = Caller(node)
    race = Race(node)
    async with race.running() as nursery:
        nursery.start_soon(caller.run)
        await trio.testing.wait_all_tasks_blocked()
        caller.answer("first")  # the reply wins the slot; the lane is not running yet
        caller.scope.cancel()  # the cancellation comes second
        await trio.testing.wait_all_tasks_blocked()
        await race.run_lane(caller)
    assert [Answer("first")] == caller.observed
