"""Application payloads by stable type name (specs/wire.md, WIRE-19..22)."""

from __future__ import annotations

from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zlink_trio._wire import MessageTypes
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import StableTypeName


@attrs.frozen
class Say:
    room: str
    text: str
    seq: int


@attrs.frozen
class Point:
    x: float
    y: float


@attrs.frozen
class Everything:
    text: str
    blob: bytes
    count: int
    ratio: float
    flag: bool
    nothing: None
    maybe: int | None
    either: int | str | None
    numbers: list[int]
    names: tuple[str, ...]
    pair: tuple[int, str]
    empty: tuple[()]
    scores: dict[str, float]
    point: Point
    path: list[Point]
    table: dict[str, list[Point | None]]


@attrs.frozen
class Tree:
    label: str
    children: list[Tree]


@attrs.frozen
class Positive:
    value: int = attrs.field()

    @value.validator
    def _check(self, _attribute: object, value: int) -> None:
        if value <= 0:
            raise ValueError("value must be positive")


@attrs.define
class Renamed:
    _secret: str
    shown: int
    derived: int = attrs.field(init=False, default=0)


@attrs.frozen
class Loose:
    anything: Any


@attrs.frozen
class WithSet:
    tags: set[str]


@attrs.frozen
class IntKeys:
    table: dict[int, str]


@attrs.frozen
class Unregistered:
    x: int


@attrs.frozen
class HoldsUnregistered:
    inner: Unregistered


@attrs.frozen
class Ambiguous:
    items: list[int] | tuple[int, ...]


class NotAttrs:
    pass


def nested_lists(depth: int) -> Any:
    """The annotation ``list[list[...[int]]]``, ``depth`` lists deep."""
    annotation: Any = int
    for _ in range(depth):
        annotation = list[annotation]
    return annotation


Deep = nested_lists(13)


@attrs.frozen
class DeepLists:
    x: Deep  # type: ignore[valid-type]  # an annotation built at run time, for a bomb test


def wrong(value: object) -> Any:
    """``value``, typed so that a test can pass it where it does not belong."""
    return value


def registry() -> MessageTypes:
    """A registry holding every travelling class of this module."""
    types = MessageTypes()
    for name, cls in [
        ("chat.Say", Say),
        ("geo.Point", Point),
        ("test.Everything", Everything),
        ("test.Tree", Tree),
        ("test.Positive", Positive),
        ("test.Renamed", Renamed),
    ]:
        types.register(name, cls)
    return types


TYPES = registry()
EXAMPLE = Everything(
    text="t",
    blob=b"b",
    count=1,
    ratio=0.5,
    flag=True,
    nothing=None,
    maybe=None,
    either="e",
    numbers=[1],
    names=("n",),
    pair=(1, "p"),
    empty=(),
    scores={"s": 1.0},
    point=Point(x=0.0, y=1.0),
    path=[],
    table={"t": [None]},
)

texts = st.text(st.characters(codec="utf-8"), max_size=20)
floats = st.floats(allow_nan=False)
ints = st.integers(-(2**64), 2**64 - 1)
points = st.builds(Point, x=floats, y=floats)
everything = st.builds(
    Everything,
    text=texts,
    blob=st.binary(max_size=20),
    count=ints,
    ratio=floats | st.integers(-(2**53), 2**53),
    flag=st.booleans(),
    nothing=st.none(),
    maybe=st.none() | ints,
    either=st.none() | ints | texts,
    numbers=st.lists(st.integers(-1000, 1000), max_size=5),
    names=st.lists(texts, max_size=4).map(tuple),
    pair=st.tuples(ints, texts),
    empty=st.just(()),
    scores=st.dictionaries(texts, floats, max_size=3),
    point=points,
    path=st.lists(points, max_size=3),
    table=st.dictionaries(texts, st.lists(st.none() | points, max_size=3), max_size=3),
)
trees = st.recursive(
    st.builds(Tree, label=texts, children=st.just([])),
    lambda inner: st.builds(Tree, label=texts, children=st.lists(inner, max_size=3)),
    max_leaves=10,
)


def protocol_error(name: str, payload: bytes, types: MessageTypes = TYPES) -> str:
    """The PROTOCOL_ERROR message of decoding ``payload`` as ``name``."""
    with pytest.raises(ZLinkError) as caught:
        types.decode(StableTypeName(name), payload)
    assert ErrorKind.PROTOCOL_ERROR is caught.value.kind
    return caught.value.message


def decoded_or_error(name: StableTypeName, payload: bytes) -> object:
    """What decoding ``payload`` as ``name`` gives: an instance, or the ZLinkError it raised."""
    try:
        return TYPES.decode(name, payload)
    except ZLinkError as exc:
        return exc


# --- registration ---------------------------------------------------------------------------


@pytest.mark.spec("WIRE-19")
def test_registering_a_name_twice_raises_value_error() -> None:
    """A second class under a registered name is refused."""
    types = MessageTypes()
    types.register("chat.Say", Say)
    with pytest.raises(ValueError, match=r"chat\.Say is already registered"):
        types.register("chat.Say", Point)


@pytest.mark.spec("WIRE-19")
def test_registering_a_class_under_two_names_raises_value_error() -> None:
    """A registered class cannot take a second name."""
    types = MessageTypes()
    types.register(StableTypeName("chat.Say"), Say)
    with pytest.raises(ValueError, match=r"already registered as chat\.Say"):
        types.register("chat.Say2", Say)


@pytest.mark.spec("WIRE-19")
@pytest.mark.parametrize("cls", [NotAttrs, int, Say(room="r", text="t", seq=1)])
def test_registering_what_is_not_an_attrs_class_raises_type_error(cls: Any) -> None:
    """Only attrs classes can be message types."""
    with pytest.raises(TypeError):
        MessageTypes().register("x", cls)


@pytest.mark.spec("WIRE-19")
@pytest.mark.parametrize("name", ["", "n" * 256])
def test_registering_under_an_invalid_name_raises_value_error(name: str) -> None:
    """A stable type name must be 1..255 bytes of UTF-8."""
    with pytest.raises(ValueError, match=r"1\.\.255"):
        MessageTypes().register(name, Say)


@pytest.mark.spec("WIRE-19")
def test_encoding_an_unregistered_class_raises_type_error() -> None:
    """An instance of a class nobody registered cannot be encoded."""
    with pytest.raises(TypeError, match="Unregistered is not a registered message type"):
        TYPES.encode(Unregistered(1))
    with pytest.raises(TypeError):
        TYPES.name_of(Unregistered)


@pytest.mark.spec("WIRE-19")
def test_names_and_classes_are_looked_up_both_ways() -> None:
    """name_of and class_of answer for registered types; class_of gives None otherwise."""
    assert StableTypeName("chat.Say") == TYPES.name_of(Say)
    assert Say is TYPES.class_of(StableTypeName("chat.Say"))
    assert TYPES.class_of(StableTypeName("chat.Nope")) is None


# --- round trips and annotations ------------------------------------------------------------


@pytest.mark.spec("WIRE-20")
def test_payload_is_a_map_of_field_names() -> None:
    """A payload is one CBOR map from field name to value."""
    name, payload = TYPES.encode(Say(room="room-1", text="hi", seq=3))
    assert StableTypeName("chat.Say") == name
    assert {"room": "room-1", "text": "hi", "seq": 3} == cbor2.loads(payload)


@pytest.mark.spec("WIRE-20")
@settings(max_examples=200, deadline=None)
@given(everything)
def test_every_supported_field_type_round_trips(message: Everything) -> None:
    """An instance using every supported annotation decodes equal to itself."""
    name, payload = TYPES.encode(message)
    assert message == TYPES.decode(name, payload)


@pytest.mark.spec("WIRE-20")
@settings(max_examples=150, deadline=None)
@given(trees)
def test_recursive_classes_round_trip(tree: Tree) -> None:
    """A class that contains itself travels."""
    assert tree == TYPES.decode(*TYPES.encode(tree))


@pytest.mark.spec("WIRE-20")
def test_an_int_in_a_float_field_comes_back_as_that_int() -> None:
    """A float field takes an int too, and decoding keeps it an int (no rounding)."""
    point = TYPES.decode(*TYPES.encode(Point(x=2**60 + 1, y=0.5)))
    assert isinstance(point, Point)
    assert type(point.x) is int
    assert 2**60 + 1 == point.x


@pytest.mark.spec("WIRE-20")
def test_private_fields_travel_by_name_and_init_false_fields_stay_home() -> None:
    """A field ``_secret`` travels as "_secret"; a field with init=False does not travel."""
    name, payload = TYPES.encode(Renamed(secret="s", shown=2))
    assert {"_secret": "s", "shown": 2} == cbor2.loads(payload)
    assert Renamed(secret="s", shown=2) == TYPES.decode(name, payload)


@pytest.mark.spec("WIRE-20")
@pytest.mark.parametrize(
    ("cls", "problem"),
    [
        (Loose, "cannot travel"),
        (WithSet, "cannot travel"),
        (IntKeys, "map keys must be str"),
        (HoldsUnregistered, "Unregistered is not a registered message type"),
        (Ambiguous, "two members"),
    ],
)
def test_unsupported_annotations_are_reported_by_check(cls: type, problem: str) -> None:
    """check() names the class, the field and why it cannot travel; so does the first encode."""
    types = MessageTypes()
    types.register("bad.Type", cls)
    with pytest.raises(ValueError, match=problem) as caught:
        types.check()
    assert "bad.Type" in str(caught.value)
    with pytest.raises(ValueError, match=problem):
        types.decode(StableTypeName("bad.Type"), b"\xa0")


@pytest.mark.spec("WIRE-20")
def test_check_passes_for_a_registry_of_travelling_classes() -> None:
    """check() is silent when every registered class can travel."""
    registry().check()


@pytest.mark.spec("WIRE-20")
@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Say(room=wrong(1), text="t", seq=1), TypeError),
        (Say(room="r", text="t", seq=True), TypeError),
        (Say(room="r", text="t", seq=2**64), ValueError),
        (Say(room="\ud800", text="t", seq=1), ValueError),
        (Tree(label="t", children=[wrong(Point(x=1.0, y=2.0))]), TypeError),
        (Tree(label="t", children=wrong((Tree("u", []),))), TypeError),
        (attrs.evolve(EXAMPLE, scores=wrong({1: 1.0})), TypeError),
        (attrs.evolve(EXAMPLE, either=wrong(1.5)), TypeError),
        (attrs.evolve(EXAMPLE, pair=wrong((1, "a", 2))), TypeError),
        (attrs.evolve(EXAMPLE, names=wrong(["a"])), TypeError),
        (attrs.evolve(EXAMPLE, path=[Point(x=wrong("1"), y=2.0)]), TypeError),
    ],
)
def test_encoding_a_wrong_value_names_the_type_and_field(
    message: object, error: type[Exception]
) -> None:
    """A field holding a value of the wrong type or out of range cannot be encoded."""
    with pytest.raises(error, match=r"test\.Tree|chat\.Say|test\.Everything"):
        TYPES.encode(message)


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.spec("WIRE-21")
def test_unknown_type_name_is_a_protocol_error_naming_it() -> None:
    """A name nobody registered gives PROTOCOL_ERROR naming that name."""
    assert "chat.Unknown" in protocol_error("chat.Unknown", b"\xa0")


@pytest.mark.spec("WIRE-21")
@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", "not one CBOR item"),
        (b"\x1c", "not one CBOR item"),
        (cbor2.dumps(["r", "t", 1]), "expects a map"),
        (cbor2.dumps({"room": "r", "text": "t"}), "missing field(s) seq"),
        (
            cbor2.dumps({"room": "r", "text": "t", "seq": 1, "extra": 0}),
            "unexpected key(s) 'extra'",
        ),
        (
            cbor2.dumps({"room": "r", "text": "t", 7: 1}),
            "missing field(s) seq; unexpected key(s) 7",
        ),
        (cbor2.dumps({"room": "r", "text": "t", "seq": "1"}), "at .seq: expects int, got str"),
        (cbor2.dumps({"room": "r", "text": "t", "seq": True}), "at .seq: expects int, got bool"),
        (cbor2.dumps({"room": b"r", "text": "t", "seq": 1}), "at .room: expects str, got bytes"),
    ],
)
def test_malformed_payload_is_a_protocol_error_naming_the_type(
    payload: bytes, problem: str
) -> None:
    """Undecodable, non-map, missing or extra fields and wrong types name type and field."""
    message = protocol_error("chat.Say", payload)
    assert "chat.Say" in message
    assert problem in message


@pytest.mark.spec("WIRE-21")
def test_nested_wrong_value_is_reported_at_its_path() -> None:
    """A wrong value deep inside names its path from the top of the payload."""
    payload = cbor2.dumps({"label": "a", "children": [{"label": "b", "children": [{"label": 5}]}]})
    message = protocol_error("test.Tree", payload)
    assert "test.Tree at .children[0].children[0]" in message


@pytest.mark.spec("WIRE-21")
def test_value_refused_by_the_class_validators_is_a_protocol_error() -> None:
    """The class's own validators judge the peer's data; their refusal is PROTOCOL_ERROR."""
    message = protocol_error("test.Positive", cbor2.dumps({"value": -3}))
    assert "test.Positive" in message
    assert "value must be positive" in message


# --- bounds ---------------------------------------------------------------------------------


def nested_tree(depth: int) -> dict[str, Any]:
    tree: dict[str, Any] = {"label": "leaf", "children": []}
    for _ in range(depth):
        tree = {"label": "node", "children": [tree]}
    return tree


@pytest.mark.spec("WIRE-22")
def test_nesting_deeper_than_32_containers_is_a_protocol_error() -> None:
    """A payload nesting containers beyond the limit is refused; within it, it decodes."""
    assert "deeper than 32" in protocol_error("test.Tree", cbor2.dumps(nested_tree(20)))
    assert TYPES.decode(StableTypeName("test.Tree"), cbor2.dumps(nested_tree(14)))


@pytest.mark.spec("WIRE-22")
def test_shared_references_that_multiply_elements_are_refused() -> None:
    """A small payload whose shared references multiply into many elements is refused."""
    # Each level is a shareable list of the level below, then three references to that level:
    # 4**12 paths in about 100 bytes. Shared indexes count from the outermost tag.
    body = b"\xd8\x1c" + cbor2.dumps([])
    for level in range(12):
        body = b"\xd8\x1c\x84" + body + (b"\xd8\x1d" + cbor2.dumps(12 - level)) * 3
    payload = cbor2.dumps({"x": 1.0})[:1] + b"\x61x" + body  # {"x": <shared levels>}
    types = MessageTypes()
    types.register("deep.Lists", DeepLists)
    assert "more elements than the payload has bytes" in protocol_error(
        "deep.Lists", payload, types
    )


@pytest.mark.spec("WIRE-22")
def test_shared_reference_cycle_is_refused() -> None:
    """A payload that refers to itself is refused instead of being walked forever."""
    cycle = b"\xd8\x1c\xa2\x65label\x61a\x68children\x81\xd8\x1d\x00"
    assert "test.Tree" in protocol_error("test.Tree", cycle)


@pytest.mark.spec("WIRE-22")
@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["chat.Say", "test.Everything", "test.Tree", "test.Positive"]), st.binary())
def test_random_payload_bytes_give_an_instance_or_protocol_error(name: str, payload: bytes) -> None:
    """Any bytes decode to an instance of the named class or to PROTOCOL_ERROR."""
    result = decoded_or_error(StableTypeName(name), payload)
    if isinstance(result, ZLinkError):
        assert ErrorKind.PROTOCOL_ERROR is result.kind
    else:
        assert TYPES.class_of(StableTypeName(name)) is type(result)


@pytest.mark.spec("WIRE-22")
@settings(max_examples=300, deadline=None)
@given(everything, st.data())
def test_mutated_payloads_give_an_instance_or_protocol_error(
    message: Everything, data: st.DataObject
) -> None:
    """Bit flips and cuts of a valid payload decode to an instance or PROTOCOL_ERROR."""
    name, payload = TYPES.encode(message)
    mutated = bytearray(payload)
    position = data.draw(st.integers(0, len(mutated) - 1))
    if data.draw(st.booleans()):
        mutated[position] ^= data.draw(st.integers(1, 255))
    else:
        del mutated[position:]
    result = decoded_or_error(name, bytes(mutated))
    if isinstance(result, ZLinkError):
        assert ErrorKind.PROTOCOL_ERROR is result.kind
    else:
        assert type(result) is Everything
