"""The reader's side of the units moving to this host (inbound.py Rule 7; arrivals.py).

Rule 1: what order needs is taken by the reader itself. ``zlink.RelocateCommit``,
``zlink.RelocateOpen`` and each ``zlink.RelocateChunk`` are answered (or, for the last chunk,
handed to its restore) before the reader reads on, so they are taken in the order the source
sent them: the source sends the commit, the relay and the open one after the other without
waiting for an answer between them (host/cutover.py Rule 1, RELOC-73). Every other request of a
move is answered by ``arrivals.py`` in a task of its own.
Rule 2: what the source relays to a unit committed here but not open yet goes in front of what
waits in it (arrivals.py Rule 3): a send as it came, a request with an entry that completes into
the reply to the source, as any request admitted by the reader (inbound.py Rule 2).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import trio

from zlink_trio._integration.transport import PeerRun
from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.system import (
    FLUSH,
    RELOCATE_CHUNK,
    RELOCATE_COMMIT,
    RELOCATE_OPEN,
    RelocateAnswer,
    RelocateChunk,
    RelocateCommit,
)
from zlink_trio._runtime.engines.completion import Outcome
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.arrivals import Arrivals, Restored
from zlink_trio._runtime.routing.local import handler_of
from zlink_trio._wire import Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["MovesIn"]

_log = logging.getLogger("zlink_trio.runtime.remote")

_RELOCATE_OPEN = RELOCATE_OPEN.value
_RELOCATE_CHUNK = RELOCATE_CHUNK.value
_RELOCATE_COMMIT = RELOCATE_COMMIT.value
_FLUSH = FLUSH.value

Reply = Callable[[PeerRun, Request, object], None]
"""Sends the answer to a request from a peer (an error as the peer sees it)."""
AnswerOutcome = Callable[[PeerRun, Request, float, Outcome], None]
"""Completes a request admitted by the reader into its reply (inbound.py Rule 2)."""


class MovesIn:
    """Rules 1 and 2, for the host's ``Inbound``."""

    def __init__(
        self, arrivals: Arrivals, node: LocalNode, reply: Reply, answer_outcome: AnswerOutcome
    ) -> None:
        self._arrivals = arrivals
        self._node = node
        self._reply = reply
        self._answer_outcome = answer_outcome

    def take(self, origin: PeerRun, message: Send | Request) -> bool:
        """Take ``message`` if it is a move's ``RelocateCommit`` or ``RelocateOpen``, or the
        relay of a unit not open yet; ``False`` for anything else."""
        arrivals = self._arrivals
        name = message.message_type.value
        if name == _RELOCATE_OPEN:
            assert isinstance(message, Request)
            self._reply(origin, message, arrivals.open(origin.node_rid, message.target))
            return True
        if name == _RELOCATE_COMMIT:
            self._take_commit(origin, message)
            return True
        restored = arrivals.relayed(origin.node_rid, message.target)
        if restored is None or message.message_type.value == _FLUSH:
            return False  # a flush is answered by inbound.py (reroute.py Rule 2)
        self._take_relayed(origin, message, restored)
        return True

    def answer(self, origin: PeerRun, message: Request, nursery: trio.Nursery) -> None:
        """Answer one of a move's requests (Rule 1)."""
        if message.message_type.value == _RELOCATE_CHUNK:
            self._take_chunk(origin, message, nursery)
        else:
            nursery.start_soon(self._answer_move, origin, message)

    def _take_relayed(self, origin: PeerRun, message: Send | Request, restored: Restored) -> None:
        node = self._node
        request = message if type(message) is Request else None
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            kind = HandlerKind.PACKET if request is None else HandlerKind.REQUEST
            handler = handler_of(restored.declared, type(decoded), kind)
            metadata = dict(message.metadata)
            if request is None:
                restored.take(Envelope(decoded, handler, restored.context(metadata, None), None))
                return
            deadline = node.clock.now() + max(request.budget_us / 1_000_000, 1e-6)
            entry = node.dispatcher.register(
                partial(self._answer_outcome, origin, request, deadline)
            )
            context = restored.context(metadata, deadline)
            restored.take(Envelope(decoded, handler, context, entry.route, request.operation_id))
        except ZLinkError as error:
            if request is not None:
                self._reply(origin, request, error)
            else:
                _log.warning("a relayed send to %s was not admitted: %s", message.target, error)

    def _take_commit(self, origin: PeerRun, message: Send | Request) -> None:
        """The source's word that the records name this host, one way (host/cutover.py
        Rule 1): a refusal can only be logged; the unit then waits for the store to settle it.
        Asked as a request, it is refused and not taken."""
        if type(message) is Request:
            refusal = "a zlink.RelocateCommit is sent one way, never asked"
            self._reply(origin, message, ZLinkError(ErrorKind.PROTOCOL_ERROR, refusal))
            return
        try:
            decoded = self._node.registry.messages.decode(message.message_type, message.payload)
            if not isinstance(decoded, RelocateCommit):
                raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "not a zlink.RelocateCommit")
            answer = self._arrivals.commit(origin.node_rid, message.target, decoded)
        except ZLinkError as error:
            answer = RelocateAnswer(False, str(error))
        if not answer.ok:
            _log.error(
                "the commit of %s from %s was not taken: %s", message.target, origin, answer.why
            )

    def _take_chunk(self, origin: PeerRun, message: Request, nursery: trio.Nursery) -> None:
        target = message.target
        try:
            decoded = self._node.registry.messages.decode(message.message_type, message.payload)
            if not isinstance(decoded, RelocateChunk):
                raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "not a zlink.RelocateChunk")
            answer = self._arrivals.take_chunk(origin.node_rid, target, decoded)
        except ZLinkError as error:
            self._reply(origin, message, error)
            return
        if answer is not None:
            self._reply(origin, message, answer)
            return

        async def restore() -> None:
            try:
                restored = await self._arrivals.restore_assembled(target)
            except ZLinkError as error:
                self._reply(origin, message, error)
                return
            self._reply(origin, message, restored)

        nursery.start_soon(restore)

    async def _answer_move(self, origin: PeerRun, message: Request) -> None:
        try:
            decoded = self._node.registry.messages.decode(message.message_type, message.payload)
            answer = await self._arrivals.on_request(origin.node_rid, message.target, decoded)
        except ZLinkError as error:
            self._reply(origin, message, error)
            return
        self._reply(origin, message, answer)
