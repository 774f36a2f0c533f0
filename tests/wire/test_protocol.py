"""Per-connection protocol state and its verdicts (specs/wire.md, WIRE-23..29)."""

from __future__ import annotations

import attrs
import cbor2
import pytest

from zlink_trio._wire import (
    PROTOCOL_VERSION,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    OperationId,
    PeerOpened,
    PeerProtocol,
    PeerRestarted,
    RefusalReason,
    Refused,
    Reply,
    ReplyRouteId,
    Request,
    Send,
    WireMessage,
    encode,
)
from zlink_trio.errors import ErrorKind
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

MESH = MeshName("demo")
LOCAL = NodeRid("node-local")
LOCAL_RUN = NodeGeneration(1111)
PEER = NodeRid("node-peer")
FIRST_RUN = NodeGeneration(1)
SECOND_RUN = NodeGeneration(2)
APPLICATION = ConnectionRole.APPLICATION
COMPLETION = ConnectionRole.COMPLETION

SEND = Send(SpotId("room-1"), StableTypeName("chat.Say"), b"\xa0")
REQUEST = Request(
    OperationId(1, 2), ReplyRouteId(3), SpotId("room-1"), StableTypeName("chat.Get"), b"", 5000
)
REPLY = Reply(ReplyRouteId(3), OperationId(1, 2), LOCAL_RUN, StableTypeName("chat.History"), b"")
ERROR = ErrorReply(ReplyRouteId(3), OperationId(1, 2), LOCAL_RUN, ErrorKind.NOT_FOUND, "no room")


def hello(
    generation: NodeGeneration = FIRST_RUN,
    *,
    role: ConnectionRole = APPLICATION,
    mesh: MeshName = MESH,
    rid: NodeRid = PEER,
    version: int = PROTOCOL_VERSION,
) -> Hello:
    return Hello(version, mesh, rid, generation, role)


def connection(role: ConnectionRole = APPLICATION, peer: NodeRid | None = None) -> PeerProtocol:
    return PeerProtocol(mesh=MESH, node_rid=LOCAL, generation=LOCAL_RUN, role=role, peer_rid=peer)


def opened(role: ConnectionRole = APPLICATION) -> PeerProtocol:
    protocol = connection(role)
    assert PeerOpened(PEER, FIRST_RUN) == protocol.receive(encode(hello(role=role)))
    return protocol


def state(protocol: PeerProtocol) -> tuple[bool, NodeRid | None, NodeGeneration | None]:
    return protocol.is_open, protocol.peer_rid, protocol.peer_generation


@pytest.mark.spec("WIRE-23")
@pytest.mark.parametrize("message", [SEND, REQUEST, REPLY, ERROR, Heartbeat()])
def test_nothing_but_hello_is_accepted_before_the_connection_opens(message: WireMessage) -> None:
    """Before a Hello, every other message is refused as NOT_OPENED and nothing changes."""
    protocol = connection(COMPLETION if isinstance(message, Reply | ErrorReply) else APPLICATION)
    verdict = protocol.receive(encode(message))
    assert isinstance(verdict, Refused)
    assert RefusalReason.NOT_OPENED is verdict.reason
    assert message == verdict.message
    assert (False, None, None) == state(protocol)


@pytest.mark.spec("WIRE-23")
def test_a_valid_hello_opens_the_connection() -> None:
    """The first valid Hello opens the connection and names the peer run."""
    protocol = connection()
    assert PeerOpened(PEER, FIRST_RUN) == protocol.judge(hello())
    assert (True, PEER, FIRST_RUN) == state(protocol)
    assert SEND == protocol.judge(SEND)


@pytest.mark.spec("WIRE-24")
@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (hello(version=PROTOCOL_VERSION + 1), RefusalReason.VERSION_MISMATCH),
        (hello(mesh=MeshName("other")), RefusalReason.MESH_MISMATCH),
    ],
)
def test_hello_of_another_version_or_mesh_is_refused(bad: Hello, reason: RefusalReason) -> None:
    """A Hello of another version or mesh is refused; a valid Hello still opens afterwards."""
    protocol = connection()
    verdict = protocol.judge(bad)
    assert isinstance(verdict, Refused)
    assert reason is verdict.reason
    assert (False, None, None) == state(protocol)
    assert PeerOpened(PEER, FIRST_RUN) == protocol.judge(hello())


@pytest.mark.spec("WIRE-24", "WIRE-18")
def test_hello_of_a_future_version_with_more_fields_is_refused_for_its_version() -> None:
    """A later-version Hello carrying extra fields is a version mismatch, not malformed."""
    frames = [cbor2.dumps([1, 9, "demo", "node-peer", 1, 1, ["new", "fields"]])]
    verdict = connection().receive(frames)
    assert isinstance(verdict, Refused)
    assert RefusalReason.VERSION_MISMATCH is verdict.reason


@pytest.mark.spec("WIRE-24")
def test_mismatched_hello_on_an_open_connection_changes_nothing() -> None:
    """After opening, a Hello of another mesh is refused and the peer run stays."""
    protocol = opened()
    verdict = protocol.judge(hello(SECOND_RUN, mesh=MeshName("other")))
    assert isinstance(verdict, Refused)
    assert RefusalReason.MESH_MISMATCH is verdict.reason
    assert (True, PEER, FIRST_RUN) == state(protocol)


@pytest.mark.spec("WIRE-25")
def test_hello_for_the_other_role_is_refused() -> None:
    """A completion Hello on an application connection is refused."""
    protocol = connection(APPLICATION)
    verdict = protocol.judge(hello(role=COMPLETION))
    assert isinstance(verdict, Refused)
    assert RefusalReason.WRONG_CONNECTION is verdict.reason
    assert not protocol.is_open


@pytest.mark.spec("WIRE-25")
@pytest.mark.parametrize(
    ("role", "accepted", "refused"),
    [
        (APPLICATION, [SEND, REQUEST, Heartbeat()], [REPLY, ERROR]),
        (COMPLETION, [REPLY, ERROR, Heartbeat()], [SEND, REQUEST]),
    ],
)
def test_each_connection_carries_only_its_role(
    role: ConnectionRole, accepted: list[WireMessage], refused: list[WireMessage]
) -> None:
    """Sends and Requests only on application, replies only on completion, heartbeats on both."""
    protocol = opened(role)
    for message in accepted:
        assert message == protocol.receive(encode(message))
    for message in refused:
        verdict = protocol.receive(encode(message))
        assert isinstance(verdict, Refused)
        assert RefusalReason.WRONG_CONNECTION is verdict.reason
        assert message == verdict.message


@pytest.mark.spec("WIRE-26")
def test_hello_from_another_rid_than_the_opener_is_refused() -> None:
    """Once opened by one RID, a Hello naming another RID is PEER_MISMATCH."""
    protocol = opened()
    verdict = protocol.judge(hello(SECOND_RUN, rid=NodeRid("impostor")))
    assert isinstance(verdict, Refused)
    assert RefusalReason.PEER_MISMATCH is verdict.reason
    assert (True, PEER, FIRST_RUN) == state(protocol)


@pytest.mark.spec("WIRE-26")
def test_hello_from_another_rid_than_the_expected_peer_is_refused() -> None:
    """A connection created for a known peer RID refuses a Hello naming any other RID."""
    protocol = connection(peer=PEER)
    verdict = protocol.judge(hello(rid=NodeRid("impostor")))
    assert isinstance(verdict, Refused)
    assert RefusalReason.PEER_MISMATCH is verdict.reason
    assert not protocol.is_open
    assert PeerOpened(PEER, FIRST_RUN) == protocol.judge(hello())


@pytest.mark.spec("WIRE-27")
def test_repeated_hello_of_the_same_run_changes_nothing() -> None:
    """The same run saying Hello again (after a reconnect) is reported as PeerOpened again."""
    protocol = opened()
    assert PeerOpened(PEER, FIRST_RUN) == protocol.judge(hello())
    assert (True, PEER, FIRST_RUN) == state(protocol)


@pytest.mark.spec("WIRE-27")
def test_hello_of_a_new_run_is_a_peer_restart() -> None:
    """A generation never seen on this connection is a new run: PeerRestarted, a new route."""
    protocol = opened()
    assert PeerRestarted(PEER, SECOND_RUN, FIRST_RUN) == protocol.judge(hello(SECOND_RUN))
    assert (True, PEER, SECOND_RUN) == state(protocol)
    assert REQUEST == protocol.judge(REQUEST)


@pytest.mark.spec("WIRE-27")
def test_hello_of_a_replaced_run_is_stale() -> None:
    """After a restart, a Hello of the replaced run is refused as STALE_GENERATION."""
    protocol = opened()
    protocol.judge(hello(SECOND_RUN))
    verdict = protocol.judge(hello(FIRST_RUN))
    assert isinstance(verdict, Refused)
    assert RefusalReason.STALE_GENERATION is verdict.reason
    assert (True, PEER, SECOND_RUN) == state(protocol)


@pytest.mark.spec("WIRE-28")
@pytest.mark.parametrize("message", [REPLY, ERROR])
def test_reply_addressed_to_another_run_of_this_node_is_stale(message: Reply | ErrorReply) -> None:
    """A reply addressed to an earlier run of this node is refused as STALE_GENERATION."""
    protocol = opened(COMPLETION)
    stale = attrs.evolve(message, requester_generation=NodeGeneration(1110))
    verdict = protocol.receive(encode(stale))
    assert isinstance(verdict, Refused)
    assert RefusalReason.STALE_GENERATION is verdict.reason
    assert stale == verdict.message
    assert message == protocol.receive(encode(message))


@pytest.mark.spec("WIRE-29")
@pytest.mark.parametrize("frames", [[], [b"\xff"], [b"\x82\x03\x00"], encode(SEND)[:1]])
def test_undecodable_frames_are_refused_as_malformed_without_changing_state(
    frames: list[bytes],
) -> None:
    """Frames that do not decode are MALFORMED with the decoder's reason; the state stays."""
    for protocol in (connection(), opened()):
        before = state(protocol)
        verdict = protocol.receive(frames)
        assert isinstance(verdict, Refused)
        assert RefusalReason.MALFORMED is verdict.reason
        assert verdict.detail
        assert verdict.message is None
        assert before == state(protocol)


@pytest.mark.spec("WIRE-29")
def test_refusal_reasons_are_distinct_enum_values() -> None:
    """Every refusal names its reason as an enum member, distinct from the others."""
    reasons = list(RefusalReason)
    assert len(reasons) == len({reason.value for reason in reasons})
    assert all(isinstance(reason, RefusalReason) for reason in reasons)
