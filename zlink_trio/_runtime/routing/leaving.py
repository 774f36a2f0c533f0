"""A relocated host's leave-taking: no peer's stale route outlives it (specs/relocation.md
RELOC-78).

Rule 1: the leaving host asks every peer. Once a relocated host's shutdown has relayed what
reached it for its moved units until that went quiet (RELOC-69), and before it seals admission,
it asks each live peer ``zlink.Leaving`` (``say_leaving``), all at once, each bounded by
``request_timeout``. It then waits for the relays those
answers set off (host/tree.py). A peer that does not answer in time is logged and passed by:
its stale routes are then covered by the quiet period alone, as before.
Rule 2: a peer answers once nothing of its own can still be on its way there unread
(``answer_leaving``). It drops every route its cache keeps to the leaving host, each flushed
there first on its next call so its order holds (reroute.py), and makes every owner read under
way read again (remote.py Rule 1); it waits until each of its sends that named the leaving host
and still waits to go (for the route, for credit, at the high-water mark) is on the connection;
then it sends the leaving host a ``zlink.Flush`` on that connection, after its earlier messages,
and answers once that is answered. The leaving host's reader
takes the flush after everything this peer sent it before, each relayed in order (RELOC-68), so
when the answer comes every such message has been relayed, and none of the peer's routes names
the leaving host any more: its next call reads the owner from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from zlink_trio._integration.transport import PeerRun
from zlink_trio._runtime.declarations.system import Flush, Leaving, RelocateAnswer
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._wire import Request
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import NodeRid, SpotId

__all__ = ["answer_leaving", "say_leaving"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


async def say_leaving(
    node: LocalNode, remote: Remote, peers: Iterable[NodeRid], about: SpotId
) -> None:
    """Rule 1: ask each of ``peers`` ``zlink.Leaving`` (addressed to ``about``, this host's
    Entry Spot) and return once each has answered or ``request_timeout`` has passed."""
    left = node.config.request_timeout
    deadline = node.clock.now() + left

    async def ask(rid: NodeRid) -> None:
        try:
            answer = await remote.request(
                Owner(rid), about, Leaving(), RelocateAnswer, {}, None, deadline
            )
        except ZLinkError as error:
            _log.info("%s did not answer this host's leaving: %s", rid, error)
            return
        if isinstance(answer, RelocateAnswer) and not answer.ok:
            _log.info("%s did not take this host's leaving: %s", rid, answer.why)

    with trio.move_on_after(left + 1.0):  # each request ends by its deadline; this is a backstop
        async with trio.open_nursery() as nursery:
            for rid in peers:
                nursery.start_soon(ask, rid)


async def answer_leaving(
    remote: Remote,
    origin: PeerRun,
    request: Request,
    arrived: float,
    answer: Callable[[PeerRun, Request, object], None],
) -> None:
    """Rule 2: ``origin`` leaves; drop its routes, flush to it, then ``answer`` its request
    (``arrived``: when it came, on the host's application clock; its budget counts from then)."""
    rid, about = origin.node_rid, request.target
    deadline = arrived + request.budget_us / 1_000_000
    result: object = RelocateAnswer(True)
    dropped = remote.forget_owner(rid)
    try:
        await remote.sends_taken(rid, deadline)  # sends that named it before, waiting to go
        await remote.request(Owner(rid), about, Flush(), RelocateAnswer, {}, None, deadline)
    except ZLinkError as error:
        result = error
    _log.debug("%s leaves: %d route(s) to it dropped", rid, dropped)
    answer(origin, request, result)
