"""Peers whose links could not be made, tried again with a bounded backoff (specs/transport.md
TRN-29, TRN-30).

Rule 1: making a peer's links can fail for want of a resource (the mesh's ``max_peers``, the
context's sockets, the process's files) or for a cause libzmq reports; such a failure never ends
the mesh. The peer is logged once, with the cause, as a WARNING (a peer that fails again and again
is not logged again until it connects or leaves), and tried again after ``FIRST_RETRY`` seconds,
twice as long after each further failure, at most ``LAST_RETRY`` seconds apart.
Rule 2: a peer is tried again only while it is wanted: removing it (its node record went away)
or connecting it anew ends its retries.
Rule 3: only ``attempt`` touches the sockets; this module keeps the times and the log.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Final

import trio

from zlink_trio._integration.transport.config import PeerAddress
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import NodeRid

__all__ = ["FIRST_RETRY", "LAST_RETRY", "ConnectRetries"]

logger = logging.getLogger("zlink_trio.transport")

FIRST_RETRY: Final = 0.05
"""Seconds before a peer whose links failed is tried again the first time."""
LAST_RETRY: Final = 5.0
"""Longest wait between two tries of the same peer (Rule 1)."""


class _Retry:
    __slots__ = ("address", "at", "delay", "failures")

    def __init__(self, address: PeerAddress, at: float) -> None:
        self.address = address
        self.at = at
        self.delay = FIRST_RETRY
        self.failures = 1


class ConnectRetries:
    """The peers waiting to be tried again, and the task that tries them (:meth:`run`).

    ``attempt(address)`` makes the peer's links, or raises ``ZLinkError`` to be tried again
    later or ``ValueError`` for an address that can never be connected.
    """

    def __init__(self, attempt: Callable[[PeerAddress], None]) -> None:
        self._attempt = attempt
        self._due: dict[NodeRid, _Retry] = {}
        self._wake: trio.CancelScope | None = None

    def address(self, node_rid: NodeRid) -> PeerAddress | None:
        """The address ``node_rid`` waits to be connected at, if it waits."""
        retry = self._due.get(node_rid)
        return None if retry is None else retry.address

    @property
    def waiting(self) -> frozenset[NodeRid]:
        """The peers waiting to be tried again now."""
        return frozenset(self._due)

    def failed(self, address: PeerAddress, error: ZLinkError) -> None:
        """``address``'s links could not be made: log it once and try again later (Rule 1)."""
        logger.warning(
            "cannot connect to peer %s: %s; trying again until it connects or leaves",
            address.node_rid,
            error.message,
        )
        self._due[address.node_rid] = _Retry(address, trio.current_time() + FIRST_RETRY)
        if self._wake is not None:
            self._wake.cancel()  # the new peer may be due before the one run() waits for

    def discard(self, node_rid: NodeRid) -> None:
        """Stop trying ``node_rid`` (it left, or it is connected anew) (Rule 2)."""
        self._due.pop(node_rid, None)

    async def run(self) -> None:
        """Try each waiting peer when it is due, forever (until cancelled)."""
        while True:
            due = min((retry.at for retry in self._due.values()), default=math.inf)
            with trio.CancelScope(deadline=due) as self._wake:
                await trio.sleep_forever()
            self._wake = None
            now = trio.current_time()
            for node_rid, retry in list(self._due.items()):
                if retry.at <= now and self._due.get(node_rid) is retry:
                    self._try(node_rid, retry, now)

    def _try(self, node_rid: NodeRid, retry: _Retry, now: float) -> None:
        del self._due[node_rid]
        try:
            self._attempt(retry.address)
        except ZLinkError as error:
            retry.failures += 1
            retry.delay = min(2 * retry.delay, LAST_RETRY)
            retry.at = now + retry.delay
            self._due[node_rid] = retry
            logger.debug("peer %s: attempt %d failed: %s", node_rid, retry.failures, error)
        except ValueError as error:
            logger.warning("gave up connecting to peer %s: %s", node_rid, error)
        else:
            logger.info("connected to peer %s after %d failed attempts", node_rid, retry.failures)
