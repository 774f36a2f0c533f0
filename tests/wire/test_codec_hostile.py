"""The wire codec against hostile bytes: fuzzed, mutated, bombs (specs/wire.md, WIRE-1..7)."""

from __future__ import annotations

import tracemalloc
from typing import Any

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

GENERATION = NodeGeneration(2**64 - 1)
OPERATION = OperationId(2**63, 12345)
ROUTE = ReplyRouteId(2**40)
SAY = StableTypeName("chat.Say")

VALID: list[WireMessage] = [
    Hello(1, MeshName("demo"), NodeRid("node-a"), GENERATION, ConnectionRole.APPLICATION),
    Hello(7, MeshName("ü-mesh"), NodeRid("n" * 255), NodeGeneration(1), ConnectionRole.COMPLETION),
    Send(SpotId("room-1"), SAY, b"\xa1\x64text\x62hi"),
    Send(ActorId("user-7"), SAY, b"", StableTypeName("counter"), (("k", "v"), ("k", "w"))),
    Request(OPERATION, ROUTE, SpotId("room-1"), SAY, b"\x80", 2_000_000, None, (("t", "x"),)),
    Request(OPERATION, ROUTE, ActorId("é" * 127), SAY, b"", 0, StableTypeName("c"), ()),
    Reply(ROUTE, OPERATION, GENERATION, StableTypeName("chat.History"), b"\xa0"),
    ErrorReply(ROUTE, OPERATION, GENERATION, ErrorKind.INTERNAL_FAILURE, "handler failed"),
    Heartbeat(),
]
WIRE_TYPES = (Hello, Send, Request, Reply, ErrorReply, Heartbeat)
MIXED_FUZZ = settings(max_examples=400, deadline=None)


def decodes_or_refuses(frames: list[bytes]) -> WireMessage | None:
    """Decode ``frames``: a valid message (which survives another round trip) or PROTOCOL_ERROR.

    Any other exception escapes and fails the test (WIRE-4).
    """
    try:
        message = decode(frames)
    except ZLinkError as exc:
        error = exc
    else:
        assert isinstance(message, WIRE_TYPES)
        assert message == decode(encode(message))
        return message
    assert ErrorKind.PROTOCOL_ERROR is error.kind
    return None


valid_frames = st.sampled_from(VALID).map(encode)

# CBOR-ready values, so fuzzed headers reach the per-field checks and not only the parser.
cbor_scalars = st.one_of(
    st.integers(-(2**64), 2**64 - 1),
    st.integers(0, 40),
    st.text(max_size=20),
    st.binary(max_size=10),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.builds(cbor2.CBORTag, st.sampled_from([1, 2, 4, 30, 99, 258]), st.integers(0, 5)),
)
cbor_values = st.one_of(
    cbor_scalars,
    st.lists(cbor_scalars, max_size=4),
    st.dictionaries(st.text(max_size=4), cbor_scalars, max_size=2),
)


@pytest.mark.spec("WIRE-4")
@MIXED_FUZZ
@given(st.lists(st.binary(max_size=120), max_size=4))
def test_random_frames_decode_or_give_protocol_error(frames: list[bytes]) -> None:
    """Random frame lists give a message or PROTOCOL_ERROR, nothing else."""
    decodes_or_refuses(frames)


@pytest.mark.spec("WIRE-4", "WIRE-7")
@settings(max_examples=250, deadline=None)
@given(st.integers(-1, 33), st.lists(cbor_values, max_size=10), st.booleans())
def test_fuzzed_headers_decode_or_give_protocol_error(
    kind: int, fields: list[Any], with_payload: bool
) -> None:
    """Headers of any kind holding arbitrary CBOR values give a message or PROTOCOL_ERROR."""
    decodes_or_refuses([cbor2.dumps([kind, *fields]), *([b"\x80"] if with_payload else [])])


@pytest.mark.spec("WIRE-4", "WIRE-7")
@MIXED_FUZZ
@given(valid_frames, st.data())
def test_valid_headers_with_replaced_elements_decode_or_give_protocol_error(
    frames: list[bytes], data: st.DataObject
) -> None:
    """Replacing elements of a valid header with arbitrary CBOR values never escapes the rules."""
    header = cbor2.loads(frames[0])
    for _ in range(data.draw(st.integers(1, 3))):
        header[data.draw(st.integers(0, len(header) - 1))] = data.draw(cbor_values)
    frames[0] = cbor2.dumps(header)
    decodes_or_refuses(frames)


@pytest.mark.spec("WIRE-4")
@MIXED_FUZZ
@given(valid_frames, st.data())
def test_truncated_valid_frames_decode_or_give_protocol_error(
    frames: list[bytes], data: st.DataObject
) -> None:
    """Cutting any frame of a valid message short gives a message or PROTOCOL_ERROR."""
    index = data.draw(st.integers(0, len(frames) - 1))
    cut = data.draw(st.integers(0, max(len(frames[index]) - 1, 0)))
    frames[index] = frames[index][:cut]
    decodes_or_refuses(frames)


@pytest.mark.spec("WIRE-4")
@MIXED_FUZZ
@given(valid_frames, st.data())
def test_bit_flipped_valid_frames_decode_or_give_protocol_error(
    frames: list[bytes], data: st.DataObject
) -> None:
    """Flipping bits anywhere in a valid header gives a message or PROTOCOL_ERROR."""
    header = bytearray(frames[0])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(header) - 1))
        header[position] ^= data.draw(st.integers(1, 255))
    frames[0] = bytes(header)
    decodes_or_refuses(frames)


@pytest.mark.spec("WIRE-4")
@MIXED_FUZZ
@given(valid_frames, st.data())
def test_bytes_inserted_or_deleted_decode_or_give_protocol_error(
    frames: list[bytes], data: st.DataObject
) -> None:
    """Inserting or deleting bytes in a valid header gives a message or PROTOCOL_ERROR."""
    header = bytearray(frames[0])
    position = data.draw(st.integers(0, len(header)))
    if data.draw(st.booleans()):
        header[position:position] = data.draw(st.binary(min_size=1, max_size=9))
    else:
        del header[position : position + data.draw(st.integers(1, 9))]
    frames[0] = bytes(header)
    decodes_or_refuses(frames)


@pytest.mark.spec("WIRE-1", "WIRE-4")
@pytest.mark.parametrize("message", VALID, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("change", ["drop", "add", "none"])
def test_wrong_frame_count_is_a_protocol_error(message: WireMessage, change: str) -> None:
    """One frame too few or too many, or no frame at all, is refused."""
    frames = encode(message)
    frames = {"drop": frames[:-1], "add": [*frames, b""], "none": []}[change]
    with pytest.raises(ZLinkError) as caught:
        decode(frames)
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-1")
@pytest.mark.parametrize(
    "header",
    [cbor2.dumps([]), cbor2.dumps(3), cbor2.dumps({"kind": 3}), cbor2.dumps("Request"), b""],
)
def test_header_that_is_not_a_non_empty_array_is_a_protocol_error(header: bytes) -> None:
    """An empty array, a number, a map, text or nothing is not a header."""
    with pytest.raises(ZLinkError) as caught:
        decode([header])
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-1")
@pytest.mark.parametrize("frames", [["text"], [bytearray(b"\x81\x06")], [encode(VALID[2])[0], "p"]])
def test_frames_that_are_not_bytes_are_the_callers_type_error(frames: list[Any]) -> None:
    """A frame that is not a bytes object is a bug of the caller, not input: TypeError."""
    with pytest.raises(TypeError, match="frames must be bytes"):
        decode(frames)


@pytest.mark.spec("WIRE-2")
@pytest.mark.parametrize("kind", range(16, 32))
def test_relocation_frame_kinds_are_reserved(kind: int) -> None:
    """Frame kinds 16..31 decode to PROTOCOL_ERROR saying relocation is not supported yet."""
    with pytest.raises(ZLinkError, match="not supported yet") as caught:
        decode([cbor2.dumps([kind]), b""])
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-2")
@pytest.mark.parametrize("kind", [0, 7, 15, 32, 255, -1, 2**64, True, 1.0, "1", None])
def test_unknown_frame_kind_is_a_protocol_error(kind: Any) -> None:
    """Kinds outside the table, and kinds that are not integers (True, 1.0), are refused."""
    with pytest.raises(ZLinkError, match="unknown frame kind") as caught:
        decode([cbor2.dumps([kind, 1, "m", "n", 5, 1])])
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-7")
@pytest.mark.parametrize("message", VALID[:-1], ids=lambda m: type(m).__name__)
@pytest.mark.parametrize(
    "wrong",
    [True, False, 1.0, b"bytes", cbor2.CBORTag(1, 0), cbor2.CBORTag(4, [-2, 5]), {"a": 1}],
    ids=["true", "false", "float", "bytes", "date", "decimal", "map"],
)
def test_wrong_cbor_type_in_any_header_element_is_a_protocol_error(
    message: WireMessage, wrong: Any
) -> None:
    """No header element accepts a boolean, float, byte string, tagged value or map."""
    header = cbor2.loads(encode(message)[0])
    for index in range(1, len(header)):
        changed = list(header)
        changed[index] = wrong
        with pytest.raises(ZLinkError) as caught:
            decode([cbor2.dumps(changed), *encode(message)[1:]])
        assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-7")
@pytest.mark.parametrize("message", VALID[:-1], ids=lambda m: type(m).__name__)
def test_null_is_refused_where_a_value_is_required(message: WireMessage) -> None:
    """Only the instance Spot type may be null; null anywhere else is refused."""
    header = cbor2.loads(encode(message)[0])
    optional = {Send: {3}, Request: {6}}.get(type(message), set())
    for index in set(range(1, len(header))) - optional:
        changed = list(header)
        changed[index] = None
        with pytest.raises(ZLinkError):
            decode([cbor2.dumps(changed), *encode(message)[1:]])


def peak_bytes_of_decoding(frames: list[bytes]) -> int:
    """Peak memory traced while decoding ``frames``, which must give PROTOCOL_ERROR."""
    tracemalloc.start()
    try:
        with pytest.raises(ZLinkError) as caught:
            decode(frames)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-5")
def test_header_above_64_kib_is_refused_unread() -> None:
    """A header frame of more than 64 KiB is refused before parsing, even if it is valid CBOR."""
    header = cbor2.dumps([6, "x" * MAX_HEADER_BYTES])
    with pytest.raises(ZLinkError, match="larger than") as caught:
        decode([header])
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind


@pytest.mark.spec("WIRE-5")
@pytest.mark.parametrize(
    "header",
    [
        b"\x81" * (MAX_HEADER_BYTES - 1) + b"\x00",
        b"\x82\x03" + b"\xa1\x00" * 30000 + b"\x00",
        b"\x9b" + b"\xff" * 8,
        b"\x9a\x7f\xff\xff\xff\x03",
        b"\x82\x03\x5b" + b"\x7f" + b"\xff" * 7,
        b"\x82\x03\x7a\x40\x00\x00\x00abc",
        b"\x82\x03\xbb" + b"\x00\xff" + b"\xff" * 6,
        b"\x9f" * 40000,
    ],
    ids=[
        "nested-arrays",
        "nested-maps",
        "huge-array",
        "big-array",
        "huge-bytes",
        "big-text",
        "huge-map",
        "indefinite-nesting",
    ],
)
def test_header_bombs_are_refused_without_exhausting_memory(header: bytes) -> None:
    """Deep nesting and huge declared lengths inside 64 KiB are refused using little memory."""
    assert peak_bytes_of_decoding([header, b""]) < 8 * 1024 * 1024


@pytest.mark.spec("WIRE-5")
def test_shared_reference_cycle_in_a_header_is_refused() -> None:
    """A header holding a CBOR shared reference to itself is refused, not walked forever."""
    cyclic = b"\xd8\x1c\x83\x02\xd8\x1d\x00\x00"  # shareable [2, <ref to itself>, 0]
    with pytest.raises(ZLinkError) as caught:
        decode([cyclic, b""])
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind
