"""The execution gate (specs/spots.md SPOT-67, SPOT-70)."""

from __future__ import annotations

import pytest
import trio

from zlink_trio._runtime.engines.gate import ExecutionGate


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
