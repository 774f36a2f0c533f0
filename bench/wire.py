"""Wire codec benchmark: a typical Request through zlink_trio._wire next to plain cbor2.

Run ``python bench/wire.py``. It measures, in one run and interleaved so that both sides see the
same machine noise, the median time of one encode+decode round trip of

- ``wire``: a Request (one metadata pair, a ~64-byte payload of a small registered attrs message)
  through ``encode`` and ``decode``: typed, checked messages and identifiers;
- ``cbor2 dict`` / ``cbor2 list``: ``cbor2.loads(cbor2.dumps(...))`` of the same field values as a
  map keyed by field name, and as a bare array (the floor: no names, no types, no checks);
- ``wire + payload`` and ``cbor2 nested``: the same, including the application message itself
  (``MessageTypes`` encode/decode vs the message as a nested map);
- ``local, as is`` and ``local, copied``: what a message to a Spot on the sender's own host costs
  for one semantics with the wire (specs/messages.md): the immutable message passes its checks
  as it is, and the same fields in a mutable class are encoded and decoded (``screen``).

The reported ratio is wire / cbor2 dict (target: at most 1.5). A benchmark reports; it does not
assert, so it always exits 0.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version

import attrs
import cbor2
from ratios import report

from zlink_trio._wire import MessageTypes, OperationId, ReplyRouteId, Request, decode, encode
from zlink_trio.ids import SpotId

BATCH = 2000
BATCHES = 50
WARMUP_BATCHES = 3


@attrs.define
class Note:
    """The same fields as ``Say`` in a mutable class: a local target gets a copy of it."""

    room: str
    author: str
    text: str
    seq: int


@attrs.frozen
class Say:
    """A small chat message: the kind of payload a request typically carries."""

    room: str
    author: str
    text: str
    seq: int


def scenario() -> dict[str, Callable[[], object]]:
    types = MessageTypes()
    types.register("chat.Say", Say)
    types.register("chat.Note", Note)
    note = Note(room="room-42", author="alice", text="hello from the wire benchmark!", seq=12345)
    limit = 4 * 1024 * 1024
    message = Say(room="room-42", author="alice", text="hello from the wire benchmark!", seq=12345)
    type_name, payload = types.encode(message)
    operation = OperationId.new()
    route = ReplyRouteId(7)
    target = SpotId("room-42")
    metadata = (("trace-id", "4bf92f3577b34da6"),)
    request = Request(operation, route, target, type_name, payload, 2_000_000, None, metadata)

    fields = {
        "operation_high": operation.high,
        "operation_low": operation.low,
        "reply_route": route.value,
        "target_kind": 1,
        "target": target.value,
        "instance_spot_type": None,
        "message_type": type_name.value,
        "budget_us": 2_000_000,
        "metadata": [list(pair) for pair in metadata],
        "payload": payload,
    }
    values = list(fields.values())
    nested = {**fields, "payload": attrs.asdict(message)}

    def wire() -> object:
        return decode(encode(request))

    def cbor2_dict() -> object:
        return cbor2.loads(cbor2.dumps(fields))

    def cbor2_list() -> object:
        return cbor2.loads(cbor2.dumps(values))

    def wire_and_payload() -> object:
        name, body = types.encode(message)
        sent = Request(operation, route, target, name, body, 2_000_000, None, metadata)
        received = decode(encode(sent))
        assert isinstance(received, Request)
        return types.decode(received.message_type, received.payload)

    def cbor2_nested() -> object:
        return cbor2.loads(cbor2.dumps(nested))

    def local_as_is() -> object:
        return types.copy(message, limit)

    def local_copied() -> object:
        return types.copy(note, limit)

    assert local_as_is() is message
    assert local_copied() == note
    assert request == wire()
    assert message == wire_and_payload()
    print(f"payload {len(payload)} bytes, header {len(encode(request)[0])} bytes")
    return {
        "wire": wire,
        "cbor2 dict": cbor2_dict,
        "cbor2 list": cbor2_list,
        "wire + payload": wire_and_payload,
        "cbor2 nested": cbor2_nested,
        "local, as is": local_as_is,
        "local, copied": local_copied,
    }


def measure(cases: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median microseconds per call of each case, batches interleaved across cases."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for round_number in range(WARMUP_BATCHES + BATCHES):
        for name, case in cases.items():
            gc.disable()
            start = time.perf_counter_ns()
            for _ in range(BATCH):
                case()
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            if round_number >= WARMUP_BATCHES:
                samples[name].append(elapsed / BATCH / 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    print(f"Python {sys.version.split()[0]}, cbor2 {version('cbor2')}")
    started = time.perf_counter()
    medians = measure(scenario())
    for name, median in medians.items():
        print(f"  {name:<15} {median:7.2f} µs per encode+decode (median)")
    ratio = medians["wire"] / medians["cbor2 dict"]
    print(f"ratio wire / cbor2 dict         {ratio:5.2f}  (target <= 1.5)")
    report("wire / cbor2 dict", ratio, "lower")
    print(
        f"ratio wire / cbor2 list         {medians['wire'] / medians['cbor2 list']:5.2f}  (floor)"
    )
    end_to_end = medians["wire + payload"] / medians["cbor2 nested"]
    print(f"ratio wire+payload / nested     {end_to_end:5.2f}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
