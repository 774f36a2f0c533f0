"""Wire-internal call identities: OperationId, ReplyRouteId, CallId (specs/identifiers.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zlink_trio._wire.ids import CallId, OperationId, ReplyRouteId
from zlink_trio.ids import NodeGeneration, NodeRid

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.mark.spec("ID-10.1")
@given(U64, U64)
def test_operation_id_is_two_u64_words_never_both_zero(high: int, low: int) -> None:
    """Any two u64 words make an OperationId except (0, 0)."""
    if high == low == 0:
        with pytest.raises(ValueError, match="both words zero"):
            OperationId(high, low)
    else:
        assert (high, low) == (OperationId(high, low).high, OperationId(high, low).low)


@pytest.mark.spec("ID-10.1")
@pytest.mark.parametrize(("high", "low"), [(-1, 1), (2**64, 1), (1, 2**64), (1, -1)])
def test_operation_id_words_must_fit_in_64_bits(high: int, low: int) -> None:
    """A word below 0 or above 2**64-1 is refused."""
    with pytest.raises(ValueError):
        OperationId(high, low)


@pytest.mark.spec("ID-10.2")
@given(U64, U64, U64, U64)
def test_operation_ids_are_equal_only_when_both_words_are(a: int, b: int, c: int, d: int) -> None:
    """Equality compares the high and the low word; sharing one word is not enough."""
    if (a, b) == (0, 0) or (c, d) == (0, 0):
        return
    assert (OperationId(a, b) == OperationId(c, d)) == ((a, b) == (c, d))


@pytest.mark.spec("ID-10.2")
def test_operation_ids_sharing_a_low_word_differ() -> None:
    """Two operations whose low words match are still two operations."""
    assert OperationId(1, 7) != OperationId(2, 7)
    assert len({OperationId.new() for _ in range(1000)}) == 1000


@pytest.mark.spec("ID-10.3")
@given(st.integers(min_value=-5, max_value=2**64 + 5))
def test_reply_route_id_is_a_non_zero_u64(value: int) -> None:
    """A ReplyRouteId is in 1..2**64-1."""
    if 1 <= value <= 2**64 - 1:
        assert value == ReplyRouteId(value).value
    else:
        with pytest.raises(ValueError):
            ReplyRouteId(value)


@pytest.mark.spec("ID-6.5")
def test_a_call_id_from_before_a_restart_never_equals_one_after_it() -> None:
    """The same node RID and counter in two runs of the node are two different calls."""
    rid = NodeRid("node-a")
    before = CallId(rid, NodeGeneration.new(), ReplyRouteId(1))
    after = CallId(rid, NodeGeneration.new(), ReplyRouteId(1))
    assert before != after
    assert before == CallId(rid, before.node_generation, ReplyRouteId(1))


@pytest.mark.spec("ID-6.5")
def test_call_id_parts_must_be_their_dedicated_types() -> None:
    """A call id is built only from a NodeRid, a NodeGeneration and a ReplyRouteId."""
    with pytest.raises(TypeError):
        CallId("node-a", NodeGeneration.new(), ReplyRouteId(1))  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError):
        CallId(NodeRid("node-a"), 5, ReplyRouteId(1))  # type: ignore[arg-type]  # the point
    with pytest.raises(TypeError):
        CallId(NodeRid("node-a"), NodeGeneration.new(), 1)  # type: ignore[arg-type]  # the point
