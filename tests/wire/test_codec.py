"""The wire codec on valid messages and at the edges of every field (specs/wire.md, WIRE-1..18)."""

from __future__ import annotations

from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zlink_trio._wire import (
    MAX_HEADER_BYTES,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    OperationId,
    Reply,
    ReplyRouteId,
    Request,
    Send,
    WireMessage,
    decode,
    encode,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

U64 = 2**64 - 1

# --- strategies for valid messages ----------------------------------------------------------

utf8_text = st.characters(codec="utf-8")


def text_of(min_bytes: int, max_bytes: int) -> st.SearchStrategy[str]:
    """Text whose UTF-8 size is in min_bytes..max_bytes, including the exact limits."""
    exact = ["a" * max_bytes, "é" * (max_bytes // 2) + "a" * (max_bytes % 2)]
    return st.one_of(
        st.text(utf8_text, min_size=min_bytes, max_size=max_bytes // 4),
        st.sampled_from(exact),
    )


def id_text() -> st.SearchStrategy[str]:
    return text_of(1, 255)


u64 = st.integers(0, U64)
operation_ids = st.tuples(u64, u64).filter(any).map(lambda words: OperationId(*words))
reply_routes = st.integers(1, U64).map(ReplyRouteId)
generations = st.integers(1, U64).map(NodeGeneration)
type_names = id_text().map(StableTypeName)
targets = st.one_of(id_text().map(SpotId), id_text().map(ActorId))
metadata = st.lists(st.tuples(text_of(1, 255), text_of(0, 1024)), max_size=32).map(tuple)
payloads = st.binary(max_size=300)

hellos = st.builds(
    Hello,
    protocol_version=st.integers(1, 0xFFFF),
    mesh=id_text().map(MeshName),
    node_rid=id_text().map(NodeRid),
    node_generation=generations,
    role=st.sampled_from(ConnectionRole),
)
sends = st.builds(
    Send,
    target=targets,
    message_type=type_names,
    payload=payloads,
    instance_spot_type=st.none() | type_names,
    metadata=metadata,
)
requests = st.builds(
    Request,
    operation_id=operation_ids,
    reply_route=reply_routes,
    target=targets,
    message_type=type_names,
    payload=payloads,
    budget_us=st.integers(0, 2**63 - 1),
    instance_spot_type=st.none() | type_names,
    metadata=metadata,
)
replies = st.builds(
    Reply,
    reply_route=reply_routes,
    operation_id=operation_ids,
    requester_generation=generations,
    reply_type=type_names,
    payload=payloads,
)
error_replies = st.builds(
    ErrorReply,
    reply_route=reply_routes,
    operation_id=operation_ids,
    requester_generation=generations,
    kind=st.sampled_from(ErrorKind),
    message=text_of(0, 4096),
)
messages = st.one_of(hellos, sends, requests, replies, error_replies, st.just(Heartbeat()))


def wrong(value: object) -> Any:
    """``value``, typed so that a test can pass it where it does not belong."""
    return value


def revalidated(value: Any) -> Any:
    """``value`` rebuilt through every attrs constructor it contains, validators included."""
    if attrs.has(type(value)):
        fields = {f.alias: revalidated(getattr(value, f.name)) for f in attrs.fields(type(value))}
        return type(value)(**fields)
    if isinstance(value, tuple):
        return tuple(revalidated(item) for item in value)
    return value


@attrs.frozen(repr=False)
class SpotIdSubclass(SpotId):
    """Not a target type: targets are exactly SpotId or ActorId."""


SPOT = SpotId("room-1")
OPERATION = OperationId(1, 2)
ROUTE = ReplyRouteId(7)
GENERATION = NodeGeneration(99)
SAY = StableTypeName("chat.Say")


def request(**changes: Any) -> Request:
    base = Request(OPERATION, ROUTE, SPOT, SAY, b"payload", 1_000_000, None, (("k", "v"),))
    return attrs.evolve(base, **changes)


def with_header(message: WireMessage, index: int, value: Any) -> list[bytes]:
    """The frames of ``message`` with header element ``index`` replaced by ``value``."""
    frames = encode(message)
    header = cbor2.loads(frames[0])
    header[index] = value
    return [cbor2.dumps(header), *frames[1:]]


def refused(frames: list[bytes]) -> str:
    """The PROTOCOL_ERROR message decoding ``frames`` raises."""
    with pytest.raises(ZLinkError) as caught:
        decode(frames)
    assert caught.value.kind is ErrorKind.PROTOCOL_ERROR
    return caught.value.message


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.spec("WIRE-3", "WIRE-16")
@settings(max_examples=400, deadline=None)
@given(messages)
def test_every_message_kind_decodes_to_an_equal_message(message: WireMessage) -> None:
    """Decoding the frames of any valid message gives a message equal to it."""
    assert message == decode(encode(message))


@pytest.mark.spec("WIRE-10", "WIRE-17")
@settings(max_examples=200, deadline=None)
@given(messages)
def test_decoded_messages_equal_their_validated_construction(message: WireMessage) -> None:
    """What the decoder builds equals what the validating constructors build from its fields."""
    decoded = decode(encode(message))
    assert revalidated(decoded) == decoded
    assert type(decoded) is type(message)


@pytest.mark.spec("WIRE-1", "WIRE-2")
@pytest.mark.parametrize(
    ("message", "kind", "frame_count"),
    [
        (Hello(1, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.APPLICATION), 1, 1),
        (Send(SPOT, SAY, b"p"), 2, 2),
        (request(), 3, 2),
        (Reply(ROUTE, OPERATION, GENERATION, SAY, b"p"), 4, 2),
        (ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.NOT_FOUND, "gone"), 5, 1),
        (Heartbeat(), 6, 1),
    ],
)
def test_frame_zero_is_one_cbor_array_led_by_the_kind(
    message: WireMessage, kind: int, frame_count: int
) -> None:
    """Frame 0 is a CBOR array whose first element is the kind; the frame count is fixed."""
    frames = encode(message)
    assert frame_count == len(frames)
    assert kind == cbor2.loads(frames[0])[0]
    assert all(type(frame) is bytes for frame in frames)


@pytest.mark.spec("WIRE-1")
def test_request_header_layout_is_the_documented_one() -> None:
    """A Request's header holds the documented fields in the documented order."""
    message = request(instance_spot_type=StableTypeName("counter"), metadata=(("a", "1"),))
    header = cbor2.loads(encode(message)[0])
    assert [3, 1, 2, 7, 1, "room-1", "counter", "chat.Say", 1_000_000, ["a", "1"]] == header


@pytest.mark.spec("WIRE-16")
def test_replies_carry_the_whole_correlation_and_the_requester_run() -> None:
    """Reply and ErrorReply headers hold the reply route, both OperationId words and the run."""
    operation = OperationId(U64, 3)
    reply = Reply(ROUTE, operation, GENERATION, SAY, b"p")
    error = ErrorReply(ROUTE, operation, GENERATION, ErrorKind.DEADLINE_EXCEEDED, "late")
    assert [4, 7, U64, 3, 99, "chat.Say"] == cbor2.loads(encode(reply)[0])
    assert [5, 7, U64, 3, 99, 7, "late"] == cbor2.loads(encode(error)[0])
    assert reply == decode(encode(reply))
    assert error == decode(encode(error))


@pytest.mark.spec("WIRE-6")
def test_payload_frame_is_the_same_object_both_ways() -> None:
    """encode puts the payload object itself in the frames; decode puts the frame itself back."""
    payload = b"x" * 1000
    frames = encode(request(payload=payload))
    assert frames[1] is payload
    received = [frames[0], bytes(bytearray(payload))]
    decoded = decode(received)
    assert isinstance(decoded, Request)
    assert decoded.payload is received[1]


@pytest.mark.spec("WIRE-6")
def test_payload_frame_of_any_size_is_carried_unread() -> None:
    """The codec does not parse or limit the payload frame: any bytes travel as they are."""
    payload = b"\xff" * (4 * MAX_HEADER_BYTES)
    decoded = decode(encode(Send(SPOT, SAY, payload)))
    assert isinstance(decoded, Send)
    assert payload == decoded.payload


@pytest.mark.spec("WIRE-15")
def test_metadata_keeps_order_and_repeated_keys() -> None:
    """Metadata pairs come back in order, repeated keys included."""
    pairs = (("k", "1"), ("a", ""), ("k", "2"))
    decoded = decode(encode(request(metadata=pairs)))
    assert isinstance(decoded, Request)
    assert pairs == decoded.metadata


# --- field boundaries at decode -------------------------------------------------------------


@pytest.mark.spec("WIRE-8")
def test_operation_id_with_both_words_zero_is_a_protocol_error() -> None:
    """OperationId {0, 0} in a Request header is refused."""
    frames = with_header(request(operation_id=OperationId(0, 1)), 2, 0)
    assert "both words zero" in refused(frames)


@pytest.mark.spec("WIRE-8")
@pytest.mark.parametrize(("index", "value"), [(1, U64 + 1), (2, -1), (2, U64 + 1)])
def test_operation_id_word_outside_u64_is_a_protocol_error(index: int, value: int) -> None:
    """A word of the OperationId below 0 or above 2**64-1 is refused."""
    refused(with_header(request(), index, value))


@pytest.mark.spec("WIRE-8")
def test_either_operation_id_word_may_be_zero_alone() -> None:
    """Only both words zero is invalid; one zero word is a valid OperationId."""
    for operation in (OperationId(0, 1), OperationId(1, 0), OperationId(U64, U64)):
        assert request(operation_id=operation) == decode(encode(request(operation_id=operation)))


@pytest.mark.spec("WIRE-9")
@pytest.mark.parametrize("value", [0, -1, U64 + 1])
@pytest.mark.parametrize(
    ("message", "index"),
    [
        (request(), 3),
        (Reply(ROUTE, OPERATION, GENERATION, SAY, b""), 1),
        (ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.REJECTED, ""), 1),
    ],
)
def test_reply_route_outside_one_to_u64_is_a_protocol_error(
    message: WireMessage, index: int, value: int
) -> None:
    """A ReplyRouteId of zero or outside u64 is refused in every message that carries one."""
    assert "reply route" in refused(with_header(message, index, value))


@pytest.mark.spec("WIRE-10")
@pytest.mark.parametrize("text", ["", "a" * 256, "é" * 128, "€" * 86])
@pytest.mark.parametrize(
    ("message", "index"),
    [
        (Hello(1, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.COMPLETION), 2),
        (Hello(1, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.COMPLETION), 3),
        (Send(SPOT, SAY, b""), 2),
        (Send(SPOT, SAY, b""), 3),
        (Send(SPOT, SAY, b""), 4),
        (request(), 5),
        (request(), 7),
        (Reply(ROUTE, OPERATION, GENERATION, SAY, b""), 5),
    ],
)
def test_text_identifier_outside_1_to_255_bytes_is_a_protocol_error(
    message: WireMessage, index: int, text: str
) -> None:
    """An empty identifier or one of 256 UTF-8 bytes or more is refused wherever it travels."""
    assert "1..255 UTF-8 bytes" in refused(with_header(message, index, text))


@pytest.mark.spec("WIRE-10")
def test_identifier_of_exactly_255_bytes_travels() -> None:
    """An identifier of exactly 255 UTF-8 bytes (multi-byte characters too) is accepted."""
    for text in ("a" * 255, "é" * 127 + "a", "€" * 85):
        message = request(target=ActorId(text), message_type=StableTypeName(text))
        decoded = decode(encode(message))
        assert message == decoded
        assert isinstance(decoded, Request)
        assert type(decoded.target) is ActorId


@pytest.mark.spec("WIRE-10")
def test_many_distinct_identifiers_all_decode_to_themselves() -> None:
    """Thousands of distinct Spot ids and type names each decode to an equal identifier."""
    for number in range(6000):
        message = Send(SpotId(f"room-{number}"), StableTypeName(f"type-{number % 5000}"), b"")
        assert message == decode(encode(message))


@pytest.mark.spec("WIRE-11")
@pytest.mark.parametrize("value", [0, -5, U64 + 1])
@pytest.mark.parametrize(
    ("message", "index"),
    [
        (Hello(1, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.APPLICATION), 4),
        (Reply(ROUTE, OPERATION, GENERATION, SAY, b""), 4),
        (ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.REJECTED, ""), 4),
    ],
)
def test_node_generation_outside_one_to_u64_is_a_protocol_error(
    message: WireMessage, index: int, value: int
) -> None:
    """A node generation of zero or outside u64 is refused."""
    assert "generation" in refused(with_header(message, index, value))


@pytest.mark.spec("WIRE-12")
@pytest.mark.parametrize("value", [-1, 2**63])
def test_budget_outside_range_is_a_protocol_error(value: int) -> None:
    """A negative budget or one above 2**63-1 microseconds is refused."""
    assert "budget" in refused(with_header(request(), 8, value))


@pytest.mark.spec("WIRE-12")
@pytest.mark.parametrize("budget", [0, 1, 2**63 - 1])
def test_budget_travels_as_remaining_microseconds(budget: int) -> None:
    """The remaining budget travels as the integer microseconds it was given, limits included."""
    assert budget == cbor2.loads(encode(request(budget_us=budget))[0])[8]
    assert request(budget_us=budget) == decode(encode(request(budget_us=budget)))


@pytest.mark.spec("WIRE-13")
@pytest.mark.parametrize("number", [-1, 13, 255, 2**70])
def test_error_kind_outside_the_thirteen_is_a_protocol_error(number: int) -> None:
    """An ErrorReply whose error kind is not 0..12 is refused."""
    message = ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.UNAVAILABLE, "busy")
    assert "ErrorKind" in refused(with_header(message, 5, number))


@pytest.mark.spec("WIRE-13")
def test_every_error_kind_travels_by_its_number() -> None:
    """Each of the 13 kinds travels as its seed 003 number and comes back as the same member."""
    for kind in ErrorKind:
        message = ErrorReply(ROUTE, OPERATION, GENERATION, kind, "text")
        assert kind.value == cbor2.loads(encode(message)[0])[5]
        decoded = decode(encode(message))
        assert isinstance(decoded, ErrorReply)
        assert decoded.kind is kind


@pytest.mark.spec("WIRE-13")
def test_error_message_longer_than_4096_bytes_is_refused() -> None:
    """An error message text above 4096 UTF-8 bytes is refused at decode and at construction."""
    message = ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.REJECTED, "é" * 2048)
    assert "error message" in refused(with_header(message, 6, "é" * 2048 + "a"))
    with pytest.raises(ValueError, match="4096"):
        ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.REJECTED, "a" * 4097)


@pytest.mark.spec("WIRE-14")
@pytest.mark.parametrize("kind", [3, 4])
def test_node_and_channel_targets_are_reserved(kind: int) -> None:
    """Target kinds 3 (node) and 4 (channel) decode to PROTOCOL_ERROR: not supported yet."""
    assert "not supported yet" in refused(with_header(request(), 4, kind))


@pytest.mark.spec("WIRE-14")
@pytest.mark.parametrize("kind", [0, 5, -1, 2**64])
def test_unknown_target_kind_is_a_protocol_error(kind: int) -> None:
    """A target kind other than 1..4 is refused."""
    assert "target kind" in refused(with_header(Send(SPOT, SAY, b""), 1, kind))


@pytest.mark.spec("WIRE-14")
def test_spot_and_actor_targets_with_the_same_text_stay_distinct() -> None:
    """A Spot id and an Actor id of the same text travel as different targets."""
    spot = decode(encode(Send(SpotId("x"), SAY, b"", StableTypeName("counter"))))
    actor = decode(encode(Send(ActorId("x"), SAY, b"")))
    assert isinstance(spot, Send)
    assert isinstance(actor, Send)
    assert SpotId("x") == spot.target
    assert StableTypeName("counter") == spot.instance_spot_type
    assert ActorId("x") == actor.target
    assert {SpotId, ActorId} == {type(spot.target), type(actor.target)}


@pytest.mark.spec("WIRE-15")
@pytest.mark.parametrize(
    "flat",
    [
        ["k"],
        ["", "v"],
        ["k" * 256, "v"],
        ["k", "v" * 1025],
        ["k", 1],
        [1, "v"],
        ["k", "v"] * 33,
        "k=v",
    ],
)
def test_metadata_beyond_its_limits_is_a_protocol_error(flat: Any) -> None:
    """Odd arrays, empty or long keys, long values, non-text and over 32 pairs are refused."""
    assert "metadata" in refused(with_header(request(), 9, flat))


@pytest.mark.spec("WIRE-15", "WIRE-17")
@pytest.mark.parametrize(
    ("pairs", "error"),
    [
        ((("", "v"),), ValueError),
        ((("k" * 256, "v"),), ValueError),
        ((("k", "v" * 1025),), ValueError),
        ((("k", "v"),) * 33, ValueError),
        ((("k", "\ud800"),), ValueError),
        ((("k", 1),), TypeError),
        ((("k",),), TypeError),
        ([("k", "v")], TypeError),
    ],
)
def test_metadata_beyond_its_limits_cannot_be_made(pairs: Any, error: type[Exception]) -> None:
    """A message with invalid metadata raises ValueError or TypeError when made."""
    with pytest.raises(error):
        Send(SPOT, SAY, b"", None, pairs)


@pytest.mark.spec("WIRE-17")
@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: request(budget_us=-1), ValueError),
        (lambda: request(budget_us=2**63), ValueError),
        (lambda: request(budget_us=1.5), TypeError),
        (lambda: request(operation_id=(1, 2)), TypeError),
        (lambda: request(reply_route=7), TypeError),
        (lambda: request(target=NodeRid("n")), TypeError),
        (lambda: request(target="room-1"), TypeError),
        (lambda: request(target=SpotIdSubclass("room-1")), TypeError),
        (lambda: request(message_type="chat.Say"), TypeError),
        (lambda: request(payload="text"), TypeError),
        (lambda: request(instance_spot_type="counter"), TypeError),
        (
            lambda: Hello(0, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.APPLICATION),
            ValueError,
        ),
        (
            lambda: Hello(1, wrong("m"), NodeRid("n"), GENERATION, ConnectionRole.APPLICATION),
            TypeError,
        ),
        (lambda: Hello(1, MeshName("m"), NodeRid("n"), GENERATION, wrong(1)), TypeError),
        (lambda: Reply(ROUTE, OPERATION, wrong(99), SAY, b""), TypeError),
        (lambda: Reply(ROUTE, OPERATION, GENERATION, wrong("chat.Say"), b""), TypeError),
        (lambda: Reply(ROUTE, OPERATION, GENERATION, SAY, wrong("payload")), TypeError),
        (lambda: Reply(wrong(1), OPERATION, GENERATION, SAY, b""), TypeError),
        (lambda: ErrorReply(ROUTE, OPERATION, GENERATION, wrong(9), "x"), TypeError),
    ],
)
def test_messages_check_their_fields_when_made(make: Any, error: type[Exception]) -> None:
    """Wrong field types raise TypeError and out-of-range values ValueError at construction."""
    with pytest.raises(error):
        make()


@pytest.mark.spec("WIRE-17")
def test_encode_refuses_what_is_not_a_wire_message() -> None:
    """Encoding anything but a wire message raises TypeError."""
    with pytest.raises(TypeError):
        encode(wrong(SPOT))


@pytest.mark.spec("WIRE-18")
def test_hello_of_another_version_may_append_fields() -> None:
    """A version 2 Hello with extra fields decodes (so it can be refused for its version)."""
    frames = [cbor2.dumps([1, 2, "m", "n", 5, 1, "future", {"x": 1}])]
    decoded = decode(frames)
    assert Hello(2, MeshName("m"), NodeRid("n"), NodeGeneration(5), ConnectionRole.APPLICATION) == (
        decoded
    )


@pytest.mark.spec("WIRE-18")
def test_version_one_hello_with_extra_fields_is_a_protocol_error() -> None:
    """A version 1 Hello has exactly its five fields."""
    assert "6 header elements" in refused([cbor2.dumps([1, 1, "m", "n", 5, 1, "extra"])])


@pytest.mark.spec("WIRE-18")
@pytest.mark.parametrize(("index", "value"), [(1, 0), (1, 0x10000), (5, 0), (5, 3)])
def test_hello_with_bad_version_or_role_is_a_protocol_error(index: int, value: int) -> None:
    """A protocol version outside 1..65535 or an unknown connection role is refused."""
    hello = Hello(1, MeshName("m"), NodeRid("n"), GENERATION, ConnectionRole.APPLICATION)
    refused(with_header(hello, index, value))
