"""The execution gate (specs/spots.md SPOT-67, SPOT-70)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio._runtime.engines.gate import ExecutionGate, Turn


@pytest.mark.spec("SPOT-74")
async def test_the_gate_lets_one_turn_run_at_a_time_in_arrival_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Turns that ask for the gate run one at a time, in the order they asked."""
    gate = ExecutionGate()
    trace: list[str] = []

    async def turn(name: str) -> None:
        await gate.acquire()
        try:
            trace.append(f"+{name}")
            await trio.sleep(1)
            trace.append(f"-{name}")
        finally:
            gate.release()

    async with trio.open_nursery() as nursery:
        for name in "abcd":
            nursery.start_soon(turn, name)
            await trio.sleep(0.01)
    assert ["+a", "-a", "+b", "-b", "+c", "-c", "+d", "-d"] == trace


@pytest.mark.spec("SPOT-70")
async def test_wait_outside_gives_the_gate_back_and_takes_it_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    """While one turn waits outside, another turn runs; the first resumes holding the gate."""
    gate = ExecutionGate()
    trace: list[str] = []
    other_done = trio.Event()

    async def waiting() -> str:
        await other_done.wait()
        return "result"

    async def first() -> None:
        await gate.acquire()
        try:
            trace.append("first waits")
            trace.append(await gate.wait_outside(waiting))
            assert gate.held
        finally:
            gate.release()

    async def second() -> None:
        await gate.acquire()
        try:
            trace.append("second runs")
            other_done.set()
        finally:
            gate.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.sleep(0.01)
        nursery.start_soon(second)
    assert ["first waits", "second runs", "result"] == trace
    assert not gate.held


@pytest.mark.spec("SPOT-70")
async def test_a_turn_cancelled_while_waiting_outside_takes_the_gate_again_first() -> None:
    """A turn cancelled while it waits outside still takes its gate again before the code after
    the wait runs: it waits for the turn that holds the gate meanwhile, then ends holding it."""
    gate = ExecutionGate()
    trace: list[str] = []
    other_holds = trio.Event()

    async def other() -> None:
        await gate.acquire()
        other_holds.set()
        # Give back only once the cancelled turn is stuck waiting for the gate.
        await trio.testing.wait_all_tasks_blocked()
        trace.append("other gives back")
        gate.release()

    async with trio.open_nursery() as nursery:
        await gate.acquire()
        with trio.CancelScope() as scope:

            async def work() -> None:
                nursery.start_soon(other)
                await other_holds.wait()
                scope.cancel()
                await trio.sleep_forever()

            await gate.wait_outside(work)
        trace.append("after the wait")
        assert scope.cancelled_caught
        assert gate.held
        gate.release()
    assert ["other gives back", "after the wait"] == trace
    assert not gate.held


async def test_a_turn_without_a_shared_gate_refuses_to_yield() -> None:
    """A lane turn (``gate=None``) cannot wait outside: it raises before running its hook or the
    work, and the message names the rule (gate.py Rule 5)."""
    ran: list[str] = []

    async def work() -> None:
        ran.append("work")

    turn = Turn(None, on_yield=lambda: ran.append("hook"))
    with pytest.raises(RuntimeError) as caught:
        await turn.wait_outside(work)
    assert "a turn without a shared gate cannot yield (gate.py Rule 5)" == str(caught.value)
    assert [] == ran
