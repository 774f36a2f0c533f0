"""What a node's RouteMesh sent to and received from each peer, counted: the ledger behind the
testing kit's quiet barrier (specs/testing.md KIT-5).

Counted are the messages that carry work or its outcome (Send, Request, Reply, ErrorReply), not
Hellos or Heartbeats: a message is counted as sent once its link took it and as received once
the peer's reader judged it one of those kinds (delivered, or dropped as stale). Within one
process, every host's ``sent[peer]`` equal to that peer's ``received[host]`` means nothing is
on its way between them. Heartbeats are counted apart (``heartbeats_sent``, ``heartbeats_received``,
TRN-17): they carry no work, and an idle mesh sends none.
"""

from __future__ import annotations

from collections import Counter

from zlink_trio.ids import NodeRid

__all__ = ["Traffic"]


class Traffic:
    """Messages sent to and received from each peer node, by node RID."""

    __slots__ = ("heartbeats_received", "heartbeats_sent", "received", "sent")

    def __init__(self) -> None:
        self.sent: Counter[NodeRid] = Counter()
        self.received: Counter[NodeRid] = Counter()
        self.heartbeats_sent: Counter[NodeRid] = Counter()
        self.heartbeats_received: Counter[NodeRid] = Counter()
