"""What a Spot's move carries, as wire data (spots/transfer.py; specs/relocation.md RELOC-45,
RELOC-46): timer states as offsets from their capture, payloads in numbered chunks."""

from __future__ import annotations

import cbor2
import pytest

from zlink_trio._runtime.engines.timers import TimerState, TimerTick
from zlink_trio._runtime.spots.transfer import (
    PayloadAssembly,
    payload_chunks,
    timer_state_from_wire,
    timer_state_to_wire,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.options import TimerOptions, TimerOverrunPolicy

OPTIONS = TimerOptions(overrun_policy=TimerOverrunPolicy.CATCH_UP_BOUNDED, max_catch_up_ticks=3)


def _state() -> TimerState:
    """Captured at 1000.0 on the source: two late ticks waiting, the next one due in 0.25 s."""
    pending = (TimerTick("t", 4, 999.5, 0), TimerTick("t", 5, 999.75, 1))
    return TimerState("t", 0.25, OPTIONS, 3, 6, 1000.25, pending, 1000.0)


@pytest.mark.spec("RELOC-45")
def test_a_timer_state_keeps_its_schedule_on_the_targets_clock() -> None:
    """Through CBOR and onto a clock that reads 7.0: every time keeps its distance from the
    capture, everything else is as it was."""
    wire = cbor2.loads(cbor2.dumps(timer_state_to_wire(_state())))
    moved = timer_state_from_wire(wire, 7.0)
    assert _state().rebased(7.0) == moved
    assert 7.25 == moved.next_due
    assert [6.5, 6.75] == [tick.scheduled_at for tick in moved.pending]
    assert (3, 6, OPTIONS, 0.25) == (
        moved.last_sequence,
        moved.next_sequence,
        moved.options,
        moved.interval,
    )


@pytest.mark.spec("RELOC-45")
@pytest.mark.parametrize(
    "change",
    [
        {"due_in": float("inf")},
        {"due_in": True},
        {"policy": "never"},
        {"pending": [[2, -0.5, 0]]},  # not after the last completed tick
        {"pending": "none"},
        {"interval": -1.0},
        {"name": 5},
    ],
)
def test_a_malformed_timer_state_is_a_protocol_error(change: dict[str, object]) -> None:
    wire = {**timer_state_to_wire(_state()), **change}
    with pytest.raises(ZLinkError) as caught:
        timer_state_from_wire(wire, 7.0)
    assert ErrorKind.PROTOCOL_ERROR == caught.value.kind
    with pytest.raises(ZLinkError):
        timer_state_from_wire([wire], 7.0)


@pytest.mark.spec("RELOC-46")
@pytest.mark.parametrize("size", [0, 1, 9, 10, 11, 95])
def test_a_payload_travels_in_chunks_within_the_limit_and_arrives_whole(size: int) -> None:
    payload = bytes(range(size))
    chunks = payload_chunks(payload, 10)
    assert all(len(chunk) <= 10 for chunk in chunks)
    assert max(1, -(-size // 10)) == len(chunks)
    assembly = PayloadAssembly(10)
    for index, chunk in enumerate(chunks):
        assert not assembly.complete
        assembly.add(index, len(chunks), chunk)
    assert assembly.complete
    assert payload == assembly.payload


@pytest.mark.spec("RELOC-46")
@pytest.mark.parametrize(
    "arrivals",
    [
        [(1, 3, b"b")],  # out of order
        [(0, 3, b"a"), (0, 3, b"a")],  # twice
        [(0, 3, b"a"), (1, 2, b"b")],  # another count
        [(0, 1, b"a"), (1, 1, b"b")],  # past the count
        [(0, 2, b"x" * 11)],  # over the limit
        [(0, 0, b"")],
        [(0, 2, "text")],
    ],
)
def test_chunks_out_of_order_or_over_the_limit_are_a_protocol_error(
    arrivals: list[tuple[int, int, object]],
) -> None:
    assembly = PayloadAssembly(10)
    *accepted, (index, count, chunk) = arrivals
    for earlier in accepted:
        assembly.add(*earlier)
    with pytest.raises(ZLinkError) as caught:
        assembly.add(index, count, chunk)
    assert ErrorKind.PROTOCOL_ERROR == caught.value.kind
    with pytest.raises(ZLinkError):
        assembly.add(len(arrivals), 3, b"c")  # unusable after it
    with pytest.raises(ZLinkError):
        _ = assembly.payload
