"""The message limits of this host's peers (specs/messages.md MSG-6).

Rule 1: a message to a peer is bounded by the smaller of this host's
``HostConfig.max_message_bytes`` and the peer's, which its node record publishes. A receiver's
transport drops a frame over its own limit (TRN-27), so a message that this host could send but
its peer would drop is refused here, at the sender, with the ``PROTOCOL_ERROR`` of MSG-1 naming
both limits: a one-way send is not lost without a word, a request does not wait out its timeout.
Rule 2: a reply is bounded the same way by its caller's limit: the owner answers a reply that
its caller's host would drop with an ``ErrorReply`` naming the limit (inbound.py).
Rule 3: a peer whose record has no limit (a run of an older version) is held to this host's own
limit, which is what every host did before the limit was published (all hosts of a mesh were
to use one limit). A limit is known from the peer's ``PeerUp`` on, before its route is added,
so a route that is up always has its peer's limit here; it is forgotten with its ``PeerDown``.
"""

from __future__ import annotations

from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid, StableTypeName

__all__ = ["PeerLimits"]


class PeerLimits:
    """What each peer takes, and the encodings bounded by it (Rules 1-3)."""

    __slots__ = ("_messages", "_own", "_peers")

    def __init__(self, node: LocalNode) -> None:
        self._messages = node.registry.messages
        self._own = node.config.max_message_bytes
        self._peers: dict[NodeRid, int] = {}
        """Only the peers whose limit is below this host's own: no other needs a check."""

    def learn(self, record: NodeRecord) -> None:
        """``record``'s run is live: bound what goes to it by its limit (Rule 3)."""
        limit = record.max_message_bytes
        if limit is not None and limit < self._own:
            self._peers[record.rid] = limit
        else:
            self._peers.pop(record.rid, None)

    def forget(self, rid: NodeRid) -> None:
        """``rid``'s run is gone (Rule 3)."""
        self._peers.pop(rid, None)

    def encode(self, message: object, rid: NodeRid) -> tuple[StableTypeName, bytes]:
        """``message``'s encoding, within this host's limit and ``rid``'s (Rules 1, 2): the
        encoder's ``TypeError``/``ValueError``, else ``PROTOCOL_ERROR``."""
        name, payload = self._messages.encode_within(message, self._own)
        self.check(rid, name, payload)
        return name, payload

    def fits(self, message: object, rid: NodeRid) -> tuple[StableTypeName, bytes] | None:
        """``message``'s encoding if it is within this host's limit and ``rid``'s, else None."""
        try:
            return self.encode(message, rid)
        except ZLinkError:
            return None

    def check(self, rid: NodeRid, name: StableTypeName, payload: bytes) -> None:
        """``PROTOCOL_ERROR`` naming both limits when ``payload``, already within this host's
        limit, is over ``rid``'s (Rule 1)."""
        limit = self._peers.get(rid)
        if limit is not None and len(payload) > limit:
            raise ZLinkError(
                ErrorKind.PROTOCOL_ERROR,
                f"a {name} message of {len(payload)} bytes is over the message limit of "
                f"{limit} bytes of {rid} (this host's limit is {self._own} bytes)",
            )
