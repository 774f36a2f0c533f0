"""Identifier types through the public API (specs/identifiers.md)."""

from __future__ import annotations

import json
import unicodedata

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import zlink_trio as zl

TEXT_IDS = [zl.SpotId, zl.ActorId, zl.StableTypeName, zl.MeshName, zl.NodeRid, zl.ChannelName]
MAX_GENERATION = 2**63 - 1


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


encodable_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)


@pytest.mark.spec("ID-6.2", "ID-1")
@pytest.mark.parametrize("kind", TEXT_IDS)
@given(text=encodable_text)
def test_text_id_accepts_exactly_1_to_255_utf8_bytes(kind: type, text: str) -> None:
    """A text id is made from any string of 1..255 UTF-8 bytes and refused otherwise."""
    if 1 <= utf8_size(text) <= 255:
        assert text == kind(text).value == str(kind(text))
    else:
        with pytest.raises(ValueError, match=r"1\.\.255 bytes"):
            kind(text)


@pytest.mark.spec("ID-1")
@pytest.mark.parametrize("kind", TEXT_IDS)
@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a", True),
        ("", False),
        ("x" * 255, True),
        ("x" * 256, False),
        ("é" * 127 + "x", True),  # 255 bytes in 128 characters
        ("é" * 128, False),  # 256 bytes in 128 characters
        ("😀" * 63 + "xyz", True),  # 255 bytes
        ("😀" * 64, False),  # 256 bytes in 64 characters
    ],
)
def test_text_id_length_is_counted_in_utf8_bytes(kind: type, text: str, ok: bool) -> None:
    """The 255 limit counts UTF-8 bytes, not characters."""
    if ok:
        assert text == kind(text).value
    else:
        with pytest.raises(ValueError):
            kind(text)


@pytest.mark.spec("ID-1")
@pytest.mark.parametrize("kind", TEXT_IDS)
@pytest.mark.parametrize("value", [b"room", 7, None, ["r"], zl.SpotId("r")])
def test_text_id_refuses_a_value_that_is_not_a_str(kind: type, value: object) -> None:
    """Bytes, numbers, None and other ids are refused with TypeError, never coerced."""
    with pytest.raises(TypeError):
        kind(value)


@pytest.mark.spec("ID-1")
@pytest.mark.parametrize("kind", TEXT_IDS)
def test_text_id_refuses_a_lone_surrogate(kind: type) -> None:
    """A string that is not valid UTF-8 (a lone surrogate) is refused with ValueError."""
    with pytest.raises(ValueError, match="UTF-8"):
        kind("room-\udc80")


@pytest.mark.spec("ID-2")
@given(a=encodable_text.filter(lambda t: 1 <= utf8_size(t) <= 255))
def test_spot_ids_compare_exactly_without_case_folding_or_normalisation(a: str) -> None:
    """Two spot ids are equal only when their strings are identical, code point by code point."""
    for other in {a.upper(), a.lower(), unicodedata.normalize("NFC", a)}:
        assume(utf8_size(other) <= 255)
        assert (zl.SpotId(a) == zl.SpotId(other)) == (a == other)


@pytest.mark.spec("ID-2")
def test_composed_and_decomposed_forms_are_different_ids() -> None:
    """'é' as one code point and as e + combining accent are two different ids."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert zl.SpotId(composed) != zl.SpotId(decomposed)
    assert zl.ActorId("Room") != zl.ActorId("room")


@pytest.mark.spec("ID-6.1")
def test_ids_of_different_kinds_never_compare_equal() -> None:
    """A SpotId, an ActorId and the plain string with the same text are three unequal values."""
    values = [kind("same") for kind in TEXT_IDS]
    for i, left in enumerate(values):
        assert left != "same"
        for right in values[i + 1 :]:
            assert left != right
    assert len(set(values)) == len(TEXT_IDS)


@pytest.mark.spec("ID-1")
@pytest.mark.parametrize("kind", TEXT_IDS)
def test_ids_are_frozen(kind: type) -> None:
    """An id cannot be changed after it is made."""
    value = kind("room")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        value.value = "other"


@pytest.mark.spec("ID-3")
@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_object_generation_accepts_exactly_1_to_2_pow_63_minus_1(value: int) -> None:
    """An object generation is an int in 1..2**63-1; anything else is refused with ValueError."""
    if 1 <= value <= MAX_GENERATION:
        assert value == zl.ObjectGeneration(value).value
    else:
        with pytest.raises(ValueError):
            zl.ObjectGeneration(value)


@pytest.mark.spec("ID-3")
@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_object_generation_refuses_values_that_are_not_int(value: object) -> None:
    """bool, float and str are refused with TypeError, even when they look like 1."""
    with pytest.raises(TypeError):
        zl.ObjectGeneration(value)  # type: ignore[arg-type]  # the wrong type is the point


@pytest.mark.spec("ID-4")
@given(st.integers(min_value=1, max_value=MAX_GENERATION))
def test_object_generation_json_form_is_a_decimal_string(value: int) -> None:
    """The JSON form is the decimal string, survives a JSON round trip, and reads back equal."""
    generation = zl.ObjectGeneration(value)
    text = json.loads(json.dumps(generation.to_json()))
    assert str(value) == text
    assert generation == zl.ObjectGeneration.from_json(text)


@pytest.mark.spec("ID-4")
@pytest.mark.parametrize(
    "text", ["", "0", "01", "+1", "-1", " 1", "1 ", "1.0", "1e3", "\u0661", str(2**63)]
)
def test_object_generation_json_form_refuses_non_canonical_text(text: str) -> None:
    """Signs, spaces, leading zeros, exponents, non-ASCII digits and out-of-range are refused."""
    with pytest.raises(ValueError):
        zl.ObjectGeneration.from_json(text)


@pytest.mark.spec("ID-3")
def test_object_generations_are_ordered() -> None:
    """Generations grow, so they compare by number."""
    assert zl.ObjectGeneration(1) < zl.ObjectGeneration(2) <= zl.ObjectGeneration(2)


@pytest.mark.spec("ID-5")
def test_node_generation_is_a_fresh_non_zero_token_each_start() -> None:
    """Every start draws a new non-zero generation; 0 and values past 64 bits are refused."""
    drawn = {zl.NodeGeneration.new() for _ in range(1000)}
    assert len(drawn) == 1000
    assert all(generation.value != 0 for generation in drawn)
    for bad in (0, -1, 2**64):
        with pytest.raises(ValueError):
            zl.NodeGeneration(bad)


@pytest.mark.spec("ID-5")
def test_node_generation_supports_equality_only() -> None:
    """Generations of a node are equal or not; asking which is newer is an error."""
    a, b = zl.NodeGeneration(5), zl.NodeGeneration(9)
    assert a == zl.NodeGeneration(5)
    assert a != b
    with pytest.raises(TypeError):
        _ = a < b  # type: ignore[operator]  # ordering is deliberately not defined


@pytest.mark.spec("ID-7")
@pytest.mark.parametrize(("kind", "numbers"), [
    (zl.SpotKind, {"INVALID": 0, "ENTRY": 1, "USER": 2, "INSTANCE": 3}),
    (zl.SpotCloseReason, {
        "EXPLICIT_CLOSE": 0, "HOST_SHUTDOWN": 1, "RELOCATION_OUT": 2, "IDLE_EVICTED": 3,
    }),
])  # fmt: skip
def test_spot_enums_have_the_shared_numbers(kind: type, numbers: dict[str, int]) -> None:
    """SpotKind and SpotCloseReason hold exactly the members and numbers of seed 000."""
    assert numbers == {member.name: member.value for member in kind}  # type: ignore[attr-defined]  # enum members


spot_refs = st.builds(
    zl.SpotRef,
    st.text(min_size=1, max_size=20),
    st.integers(min_value=1, max_value=MAX_GENERATION),
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
)


@pytest.mark.spec("ID-8")
@given(spot_refs)
def test_spot_ref_is_an_immutable_snapshot_with_a_json_form(ref: zl.SpotRef) -> None:
    """A SpotRef converts its parts to id types once, cannot change, and reads back from JSON."""
    assert isinstance(ref.spot_id, zl.SpotId)
    assert isinstance(ref.object_generation, zl.ObjectGeneration)
    assert isinstance(ref.mesh_name, zl.MeshName)
    assert isinstance(ref.node_rid, zl.NodeRid)
    data = json.loads(json.dumps(ref.to_json()))
    assert isinstance(data["object_generation"], str)
    assert ref == zl.SpotRef.from_json(data)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ref.spot_id = zl.SpotId("other")  # type: ignore[misc]  # frozen is the point


@pytest.mark.spec("ID-8")
def test_spot_ref_refuses_bad_parts_where_it_is_made() -> None:
    """A SpotRef with an empty id, generation 0 or a bytes mesh name is never made."""
    with pytest.raises(ValueError):
        zl.SpotRef("", 1, "mesh", "node")
    with pytest.raises(ValueError):
        zl.SpotRef("spot", 0, "mesh", "node")
    with pytest.raises(TypeError):
        zl.SpotRef("spot", 1, b"mesh", "node")  # type: ignore[arg-type]  # wrong type is the point
    with pytest.raises(ValueError):
        zl.SpotRef.from_json({"spot_id": "s", "object_generation": "1", "mesh_name": "m"})
    with pytest.raises(ValueError):
        zl.SpotRef.from_json(
            {"spot_id": "s", "object_generation": "01", "mesh_name": "m", "node_rid": "n"}
        )


@pytest.mark.spec("ID-6.3")
@pytest.mark.parametrize("kind", TEXT_IDS)
@given(text=encodable_text.filter(lambda t: 1 <= utf8_size(t) <= 255))
def test_a_text_id_has_exactly_one_notation(kind: type, text: str) -> None:
    """A text id's only notation is the exact string it was made from."""
    value = kind(text)
    assert text == str(value) == value.value
    assert kind(str(value)) == value


@pytest.mark.spec("ID-6.3")
def test_numeric_ids_have_one_notation() -> None:
    """Generations are ints; their text forms are not accepted in place of the number."""
    assert 42 == zl.ObjectGeneration(42).value
    assert "42" == zl.ObjectGeneration(42).to_json()
    for spelling in ("42", "0x2a", 42.0):
        with pytest.raises(TypeError):
            zl.ObjectGeneration(spelling)  # type: ignore[arg-type]  # another spelling is the point
        with pytest.raises(TypeError):
            zl.NodeGeneration(spelling)  # type: ignore[arg-type]  # another spelling is the point
    for spelling in ("0x2a", "042", "4.2e1"):
        with pytest.raises(ValueError):
            zl.ObjectGeneration.from_json(spelling)
