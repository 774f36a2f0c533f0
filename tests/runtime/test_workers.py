"""The worker scheduler: CPU slots, I/O work, deadlines and failures (specs/completion.md §3,
CMP-3.20..27).

CPU work that must stay busy blocks its thread on a ``threading.Event`` that the test sets; the
Trio side learns that the work started through ``trio.from_thread``. Nothing sleeps to wait:
deadline tests run on ``autojump_clock``, the others under ``trio.fail_after`` as a safety net.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from zlink_trio._runtime.engines.workers import MAX_CPU_SLOTS, WorkerScheduler
from zlink_trio.errors import ErrorKind, ZLinkError

SAFETY = 5.0
"""Seconds after which a real-clock test fails instead of hanging."""


class Blocker:
    """CPU work that tells Trio it started, then holds its thread until ``release`` is set."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, value: object) -> object:
        trio.from_thread.run_sync(self.started.set)
        # Bounded so a failing test cannot leave a thread that keeps the process alive.
        self.release.wait(timeout=30)
        self.finished.set()
        return value


@pytest.fixture
def blocker() -> Iterator[Blocker]:
    work = Blocker()
    yield work
    work.release.set()


async def occupy_cpu_slot(
    scheduler: WorkerScheduler, blocker: Blocker, nursery: trio.Nursery, results: list[object]
) -> None:
    """Start CPU work that holds a slot until released; return once its thread is running."""

    async def call() -> None:
        results.append(await scheduler.run_cpu(blocker, "blocked", deadline=None))

    nursery.start_soon(call)
    await blocker.started.wait()


@pytest.mark.spec("CMP-3.20")
@pytest.mark.parametrize(
    ("slots", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (MAX_CPU_SLOTS + 1, ValueError),
        (1.0, TypeError),
        (True, TypeError),
        ("2", TypeError),
    ],
)
def test_cpu_slots_outside_1_to_the_maximum_are_refused(slots: object, error: type) -> None:
    """WorkerScheduler takes an int number of CPU slots from 1 to MAX_CPU_SLOTS."""
    with pytest.raises(error):
        WorkerScheduler(slots)  # type: ignore[arg-type]  # bad values on purpose


@pytest.mark.spec("CMP-3.20")
def test_cpu_slots_from_1_to_the_maximum_are_accepted() -> None:
    """The bounds themselves are valid slot counts."""
    assert [1, MAX_CPU_SLOTS] == [WorkerScheduler(n).cpu_slots for n in (1, MAX_CPU_SLOTS)]


@pytest.mark.spec("CMP-3.20")
async def test_run_cpu_refuses_a_coroutine_function_before_running_anything() -> None:
    """An async function given to run_cpu raises TypeError; run_io is the way to run it."""

    async def work() -> None:
        raise AssertionError("must not run")

    with pytest.raises(TypeError):
        await WorkerScheduler(1).run_cpu(work, deadline=None)  # type: ignore[unused-coroutine]  # the misuse under test


@pytest.mark.spec("CMP-3.21")
async def test_an_io_call_completes_while_the_only_cpu_slot_is_blocked(blocker: Blocker) -> None:
    """I/O work holds no CPU slot: it runs and returns while CPU work occupies every slot."""
    scheduler = WorkerScheduler(1)
    results: list[object] = []

    async def io_work(value: str) -> str:
        await trio.lowlevel.checkpoint()
        return value

    with trio.fail_after(SAFETY):
        async with trio.open_nursery() as nursery:
            await occupy_cpu_slot(scheduler, blocker, nursery, results)
            assert 1 == scheduler.cpu_slots_in_use
            assert "io" == await scheduler.run_io(io_work, "io", deadline=None)
            assert 1 == scheduler.cpu_slots_in_use
            assert not blocker.finished.is_set()
            blocker.release.set()
    assert ["blocked"] == results
    assert 0 == scheduler.cpu_slots_in_use


@pytest.mark.spec("CMP-3.21")
async def test_more_io_calls_than_cpu_slots_wait_at_once(blocker: Blocker) -> None:
    """Eight I/O calls wait together on one event while the single CPU slot is busy."""
    scheduler = WorkerScheduler(1)
    opened = trio.Event()
    all_waiting = trio.Event()
    waiting = 0
    finished: list[int] = []
    results: list[object] = []

    async def io_work(number: int) -> int:
        nonlocal waiting
        waiting += 1
        if waiting == 8:
            all_waiting.set()
        await opened.wait()
        return number

    async def call(number: int) -> None:
        finished.append(await scheduler.run_io(io_work, number, deadline=None))

    with trio.fail_after(SAFETY):
        async with trio.open_nursery() as nursery:
            await occupy_cpu_slot(scheduler, blocker, nursery, results)
            for number in range(8):
                nursery.start_soon(call, number)
            await all_waiting.wait()
            assert (1, 0) == (scheduler.cpu_slots_in_use, scheduler.cpu_calls_waiting)
            opened.set()
            await trio.testing.wait_all_tasks_blocked()
            assert list(range(8)) == sorted(finished)
            assert [] == results
            blocker.release.set()
    assert ["blocked"] == results


@pytest.mark.spec("CMP-3.22")
async def test_cpu_calls_finding_every_slot_busy_wait_and_run_in_arrival_order(
    blocker: Blocker,
) -> None:
    """Queued CPU calls wait for the slot and get it first come, first served."""
    scheduler = WorkerScheduler(1)
    order: list[int] = []
    results: list[object] = []

    def work(number: int) -> int:
        order.append(number)
        return number

    async def call(number: int) -> None:
        results.append(await scheduler.run_cpu(work, number, deadline=None))

    with trio.fail_after(SAFETY):
        async with trio.open_nursery() as nursery:
            await occupy_cpu_slot(scheduler, blocker, nursery, results)
            for number in range(1, 4):
                nursery.start_soon(call, number)
                await trio.testing.wait_all_tasks_blocked()
                assert number == scheduler.cpu_calls_waiting
            assert [] == order
            blocker.release.set()
    assert [1, 2, 3] == order
    assert ["blocked", 1, 2, 3] == results


@pytest.mark.spec("CMP-3.22")
async def test_a_deadline_passing_in_the_slot_queue_ends_the_call_with_deadline_exceeded(
    blocker: Blocker, autojump_clock: MockClock
) -> None:
    """A CPU call still queued at its deadline raises DEADLINE_EXCEEDED; its work never runs."""
    scheduler = WorkerScheduler(1)
    ran: list[str] = []
    results: list[object] = []
    async with trio.open_nursery() as nursery:
        await occupy_cpu_slot(scheduler, blocker, nursery, results)
        deadline = trio.current_time() + 5.0
        with pytest.raises(ZLinkError) as raised:
            await scheduler.run_cpu(ran.append, "queued", deadline=deadline)
        assert ErrorKind.DEADLINE_EXCEEDED is raised.value.kind
        assert deadline == trio.current_time()
        assert 0 == scheduler.cpu_calls_waiting
        blocker.release.set()
    assert [] == ran
    assert ["blocked"] == results


@pytest.mark.spec("CMP-3.22")
async def test_a_deadline_already_past_starts_no_work(autojump_clock: MockClock) -> None:
    """A CPU or I/O call whose deadline has passed raises DEADLINE_EXCEEDED without running."""
    scheduler = WorkerScheduler(1)
    ran: list[str] = []

    async def io_work() -> None:
        ran.append("io")

    past = trio.current_time() - 1.0
    with pytest.raises(ZLinkError) as cpu:
        await scheduler.run_cpu(ran.append, "cpu", deadline=past)
    with pytest.raises(ZLinkError) as io:
        await scheduler.run_io(io_work, deadline=past)
    assert [ErrorKind.DEADLINE_EXCEEDED] * 2 == [cpu.value.kind, io.value.kind]
    assert [] == ran


@pytest.mark.spec("CMP-3.23")
async def test_a_deadline_passing_while_cpu_work_runs_discards_its_late_result(
    blocker: Blocker, autojump_clock: MockClock
) -> None:
    """At the deadline the caller gets DEADLINE_EXCEEDED; the thread finishes holding its slot."""
    scheduler = WorkerScheduler(1)
    deadline = trio.current_time() + 5.0
    with pytest.raises(ZLinkError) as raised:
        await scheduler.run_cpu(blocker, "late", deadline=deadline)
    assert ErrorKind.DEADLINE_EXCEEDED is raised.value.kind
    assert deadline == trio.current_time()
    assert not blocker.finished.is_set()
    assert 1 == scheduler.cpu_slots_in_use
    blocker.release.set()
    # The next call gets the slot only once the abandoned thread has really finished.
    assert "next" == await scheduler.run_cpu(str, "next", deadline=None)
    assert blocker.finished.is_set()
    assert 0 == scheduler.cpu_slots_in_use


@pytest.mark.spec("CMP-3.23")
async def test_a_deadline_passing_while_io_work_runs_cancels_the_work(
    autojump_clock: MockClock,
) -> None:
    """At the deadline the I/O work itself is cancelled, so it cannot complete later."""
    scheduler = WorkerScheduler(1)
    outcome: list[str] = []

    async def io_work() -> str:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            outcome.append("cancelled")
            raise

    deadline = trio.current_time() + 5.0
    with pytest.raises(ZLinkError) as raised:
        await scheduler.run_io(io_work, deadline=deadline)
    assert ErrorKind.DEADLINE_EXCEEDED is raised.value.kind
    assert ["cancelled"] == outcome


class Boom(Exception):
    """An application failure with a recognisable class name."""


def fail_with(error: Exception) -> None:
    raise error


async def fail_async_with(error: Exception) -> None:
    await trio.lowlevel.checkpoint()
    raise error


async def run_failing(scheduler: WorkerScheduler, kind: str, error: Exception) -> None:
    if kind == "cpu":
        await scheduler.run_cpu(fail_with, error, deadline=None)
    else:
        await scheduler.run_io(fail_async_with, error, deadline=None)


@pytest.mark.spec("CMP-3.24")
@pytest.mark.parametrize("kind", ["cpu", "io"])
@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ValueError("bad input"), "ValueError: bad input"),
        (Boom(), "Boom"),
        (KeyError("k"), "KeyError: 'k'"),
    ],
)
async def test_work_that_raises_ends_with_internal_failure_naming_the_exception_class(
    kind: str, error: Exception, message: str
) -> None:
    """The caller gets INTERNAL_FAILURE "<Class>: message", the original as __cause__."""
    scheduler = WorkerScheduler(1)
    with trio.fail_after(SAFETY), pytest.raises(ZLinkError) as raised:
        await run_failing(scheduler, kind, error)
    assert ErrorKind.INTERNAL_FAILURE is raised.value.kind
    assert message == raised.value.message
    assert error is raised.value.__cause__
    assert 0 == scheduler.cpu_slots_in_use


@pytest.mark.spec("CMP-3.25")
async def test_cancelling_a_caller_queued_for_a_cpu_slot_raises_cancelled(
    blocker: Blocker,
) -> None:
    """A queued CPU call whose caller is cancelled raises trio.Cancelled and never runs."""
    scheduler = WorkerScheduler(1)
    ran: list[str] = []
    results: list[object] = []
    with trio.fail_after(SAFETY):
        async with trio.open_nursery() as nursery:
            await occupy_cpu_slot(scheduler, blocker, nursery, results)
            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_when_queued, scheduler, scope)
                await scheduler.run_cpu(ran.append, "queued", deadline=None)
            assert scope.cancelled_caught
            assert 0 == scheduler.cpu_calls_waiting
            blocker.release.set()
    assert [] == ran


async def cancel_when_queued(scheduler: WorkerScheduler, scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    assert 1 == scheduler.cpu_calls_waiting
    scope.cancel()


@pytest.mark.spec("CMP-3.25")
async def test_cancelling_a_caller_while_its_cpu_work_runs_raises_cancelled_at_once(
    blocker: Blocker,
) -> None:
    """The caller is released at once; the thread runs on with its slot, its result dropped."""
    scheduler = WorkerScheduler(1)
    with trio.fail_after(SAFETY):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_once_started() -> None:
                    await blocker.started.wait()
                    scope.cancel()

                nursery.start_soon(cancel_once_started)
                await scheduler.run_cpu(blocker, "late", deadline=None)
        assert scope.cancelled_caught
        assert not blocker.finished.is_set()
        assert 1 == scheduler.cpu_slots_in_use
        blocker.release.set()
        assert "next" == await scheduler.run_cpu(str, "next", deadline=None)
    assert 0 == scheduler.cpu_slots_in_use


@pytest.mark.spec("CMP-3.25")
async def test_cancelling_a_caller_of_io_work_cancels_the_work() -> None:
    """Cancelling an I/O call's caller cancels the work and raises trio.Cancelled."""
    scheduler = WorkerScheduler(1)
    started = trio.Event()
    outcome: list[str] = []

    async def io_work() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            outcome.append("cancelled")
            raise

    with trio.fail_after(SAFETY), trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_once_started() -> None:
                await started.wait()
                scope.cancel()

            nursery.start_soon(cancel_once_started)
            await scheduler.run_io(io_work, deadline=None)
    assert scope.cancelled_caught
    assert ["cancelled"] == outcome


@pytest.mark.spec("CMP-3.26")
async def test_a_worker_call_returns_the_very_value_the_work_computed() -> None:
    """The result comes back unchanged: the same object, from CPU and from I/O work."""
    scheduler = WorkerScheduler(2)
    value = {"rows": [1, 2, 3]}

    def cpu_work(item: dict[str, list[int]]) -> dict[str, list[int]]:
        return item

    async def io_work(item: dict[str, list[int]]) -> dict[str, list[int]]:
        await trio.lowlevel.checkpoint()
        return item

    with trio.fail_after(SAFETY):
        assert value is await scheduler.run_cpu(cpu_work, value, deadline=None)
        assert value is await scheduler.run_io(io_work, value, deadline=None)


@pytest.mark.spec("CMP-3.27")
async def test_after_close_new_worker_calls_fail_with_shutting_down() -> None:
    """close() is idempotent and makes new CPU and I/O calls fail without running the work."""
    scheduler = WorkerScheduler(1)
    ran: list[str] = []

    async def io_work() -> None:
        ran.append("io")

    scheduler.close()
    scheduler.close()
    assert scheduler.closed
    with pytest.raises(ZLinkError) as cpu:
        await scheduler.run_cpu(ran.append, "cpu", deadline=None)
    with pytest.raises(ZLinkError) as io:
        await scheduler.run_io(io_work, deadline=None)
    assert [ErrorKind.SHUTTING_DOWN] * 2 == [cpu.value.kind, io.value.kind]
    assert [] == ran


@pytest.mark.spec("CMP-3.27")
async def test_close_lets_a_call_already_running_finish(blocker: Blocker) -> None:
    """Work that started before close() still returns its result to its caller."""
    scheduler = WorkerScheduler(1)
    results: list[object] = []
    with trio.fail_after(SAFETY):
        async with trio.open_nursery() as nursery:
            await occupy_cpu_slot(scheduler, blocker, nursery, results)
            scheduler.close()
            blocker.release.set()
    assert ["blocked"] == results
