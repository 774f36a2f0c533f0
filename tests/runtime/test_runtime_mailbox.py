"""The mailbox and the shared job permits (engines/mailbox.py): the answers the callers turn into
CAPACITY_EXCEEDED, NOT_FOUND, UNAVAILABLE and SHUTTING_DOWN (specs/errors.md ERR-5.10,
specs/completion.md CMP-7.9, CMP-7.10)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from zlink_trio._runtime.engines.mailbox import (
    IDLE_PERIOD,
    TAKEN_PER_CHECKPOINT,
    Burst,
    IdleServers,
    JobPermits,
    Mailbox,
    Retired,
)
from zlink_trio.errors import ErrorKind, ZLinkError


def test_a_sealed_mailbox_refuses_offer_and_try_put_with_not_found_naming_its_owner() -> None:
    """Once sealed, both admissions raise ``NOT_FOUND`` naming the owner; what was admitted before
    stays readable."""
    mailbox: Mailbox[str] = Mailbox(4)
    mailbox.offer("first", "spot room-1")
    mailbox.close()
    for admit in (mailbox.offer, mailbox.try_put):
        with pytest.raises(ZLinkError) as caught:
            admit("late", "spot room-1")
        assert ErrorKind.NOT_FOUND == caught.value.kind
        assert "spot room-1 is closing" == caught.value.message
    assert ["first"] == mailbox.take_all()


def test_a_full_mailbox_refuses_offer_and_declines_try_put() -> None:
    """A full queue: ``offer`` raises ``CAPACITY_EXCEEDED`` naming the owner, ``try_put`` says
    ``False``; neither admits anything."""
    mailbox: Mailbox[str] = Mailbox(1)
    assert mailbox.try_put("first", "spot room-1")
    with pytest.raises(ZLinkError) as caught:
        mailbox.offer("second", "spot room-1")
    assert ErrorKind.CAPACITY_EXCEEDED == caught.value.kind
    assert "the queue of spot room-1 is full" == caught.value.message
    assert not mailbox.try_put("third", "spot room-1")
    assert ["first"] == mailbox.take_all()


async def test_put_into_a_sealed_mailbox_says_false_at_once() -> None:
    """``put`` into a mailbox sealed before it is called admits nothing and says ``False``."""
    mailbox: Mailbox[str] = Mailbox(4)
    mailbox.close()
    assert not await mailbox.put("late")
    assert [] == mailbox.take_all()


async def test_put_waiting_for_room_says_false_when_the_mailbox_is_sealed() -> None:
    """A ``put`` waiting for room ends with ``False`` when the mailbox is sealed meanwhile."""
    mailbox: Mailbox[str] = Mailbox(1)
    assert await mailbox.put("first")
    results: list[bool] = []

    async def waiting_put() -> None:
        results.append(await mailbox.put("second"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_put)
        await trio.testing.wait_all_tasks_blocked()
        assert [] == results
        mailbox.close()
    assert [False] == results
    assert ["first"] == mailbox.take_all()


async def test_close_ends_a_wait_for_a_permit_with_false_and_no_permit() -> None:
    """A wait for a permit that ``close()`` ends says ``False`` and takes no permit; a later
    ``acquire`` says ``False`` at once, while a released permit can still be taken."""
    permits = JobPermits(1)
    assert permits.try_acquire()
    results: list[bool] = []

    async def waiting_acquire() -> None:
        results.append(await permits.acquire())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_acquire)
        await trio.testing.wait_all_tasks_blocked()
        assert [] == results
        permits.close()
    assert [False] == results
    assert 0 == permits.available
    assert not await permits.acquire()
    permits.release()
    assert await permits.acquire()
    assert 0 == permits.available


class _Steps(trio.abc.Instrument):
    """Counts the steps of one task: each is a run until its next checkpoint that yields."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


@pytest.mark.spec("SPOT-95")
async def test_a_burst_takes_what_is_queued_without_a_checkpoint_32_at_most_in_a_row() -> None:
    """70 queued items, taken by a ``Burst`` in a task of its own: the task runs in 3 steps (32
    taken without a checkpoint, then the channel wait that is one, twice, then the last 4), in
    order; without bursts it would take 70 steps, without the bound 1."""
    mailbox: Mailbox[int] = Mailbox(100)
    for number in range(70):
        mailbox.offer(number, "spot room-1")
    taken: list[int] = []
    steps = _Steps()

    async def serve() -> None:
        steps.task, steps.steps = trio.lowlevel.current_task(), 1  # this step counts
        burst = Burst(mailbox)
        for _ in range(70):
            taken.append(await burst.take())

    trio.lowlevel.add_instrument(steps)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert list(range(70)) == taken
    assert 3 == steps.steps
    assert 32 == TAKEN_PER_CHECKPOINT


@pytest.mark.spec("SPOT-95")
async def test_a_burst_waits_in_the_channel_when_nothing_is_queued() -> None:
    """An empty mailbox: ``take`` waits for the next item and ends with ``EndOfChannel`` once
    the mailbox is closed and empty."""
    mailbox: Mailbox[int] = Mailbox(4)
    burst = Burst(mailbox)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(burst.take)
        await trio.testing.wait_all_tasks_blocked()
        mailbox.offer(7, "spot room-1")
    mailbox.close()
    with pytest.raises(trio.EndOfChannel):
        await burst.take()


def _parked_take(mailbox: Mailbox[int], results: list[object]) -> Callable[[], Awaitable[None]]:
    async def take() -> None:
        try:
            results.append(await mailbox.take())
        except Retired:
            results.append("retired")
        except trio.EndOfChannel:
            results.append("end")

    return take


@pytest.mark.spec("SPOT-96", "DEC-28")
async def test_a_server_parked_through_a_whole_idle_period_is_retired() -> None:
    """A server parked in ``take`` outlives the sweep that ends the period it parked in and is
    retired by the next one; an arrival in between restarts its period."""
    async with trio.open_nursery() as nursery:
        assert 1.0 == IDLE_PERIOD  # DEC-28

        def spawn(function: Callable[[], Awaitable[None]]) -> bool:
            nursery.start_soon(function)
            return True

        idle = IdleServers(spawn, period=math.inf)  # swept by hand below
        mailbox: Mailbox[int] = Mailbox(4, idle=idle)
        results: list[object] = []
        nursery.start_soon(_parked_take(mailbox, results))
        await trio.testing.wait_all_tasks_blocked()
        idle.sweep()
        mailbox.offer(1, "spot room-1")  # fed within the period: served, parks anew
        await trio.testing.wait_all_tasks_blocked()
        assert [1] == results
        nursery.start_soon(_parked_take(mailbox, results))
        await trio.testing.wait_all_tasks_blocked()
        idle.sweep()
        await trio.testing.wait_all_tasks_blocked()
        assert mailbox.server_waiting
        idle.sweep()
        await trio.testing.wait_all_tasks_blocked()
        assert [1, "retired"] == results
        assert not mailbox.server_waiting
        nursery.cancel_scope.cancel()  # the sweeper task


@pytest.mark.spec("SPOT-96")
async def test_an_arrival_is_told_to_the_owner_only_when_no_server_is_parked() -> None:
    """``on_arrival`` runs for an item that no parked server will take, never for one a parked
    server is woken for."""
    told: list[int] = []
    mailbox: Mailbox[int] = Mailbox(4, lambda: told.append(len(mailbox)))
    mailbox.offer(1, "spot room-1")
    assert [1] == told
    assert 1 == await mailbox.take()
    results: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_parked_take(mailbox, results))
        await trio.testing.wait_all_tasks_blocked()
        mailbox.offer(2, "spot room-1")
    assert [1] == told
    assert [2] == results


async def test_senders_waiting_for_room_are_admitted_in_arrival_order() -> None:
    """A full mailbox: ``put`` waits, and each item taken makes room for the earliest waiting
    sender's item, so the queue keeps the order the senders arrived in (Rule 5)."""
    mailbox: Mailbox[str] = Mailbox(1)
    mailbox.offer("first", "spot room-1")
    admitted: list[str] = []

    async def put(item: str) -> None:
        assert await mailbox.put(item)
        admitted.append(item)

    async with trio.open_nursery() as nursery:
        for item in ("a", "b", "c"):
            nursery.start_soon(put, item)
            await trio.testing.wait_all_tasks_blocked()
        assert not mailbox.try_put("late", "spot room-1")  # waiting senders come first
        taken = [mailbox.take_nowait()]
        await trio.testing.wait_all_tasks_blocked()
        taken += [mailbox.take_nowait(), mailbox.take_nowait(), mailbox.take_nowait()]
    assert ["first", "a", "b", "c"] == taken
    assert ["a", "b", "c"] == sorted(admitted)  # each told True; Trio wakes them in any order


async def test_closing_ends_a_parked_server_once_the_queue_is_empty() -> None:
    """``close`` wakes a parked server: it takes what is left, then ``EndOfChannel``."""
    mailbox: Mailbox[int] = Mailbox(4)
    results: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_parked_take(mailbox, results))
        await trio.testing.wait_all_tasks_blocked()
        mailbox.close()
    assert ["end"] == results
