"""The janitor: the live member of the mesh with the smallest RID deletes the records that dead
runs left (specs/global.md GLOBAL-13; remote.py Rule 8).

Rule 1: at a peer's ``PeerDown`` the janitor reclaims what that run owned and nobody took.
Rule 2: every ``SWEEP_LEASES`` leases it also reclaims the records of any owner run that is not
live, so none is left for good when the host that removed the owner's node record died before
reclaiming.
"""

from __future__ import annotations

import logging

import trio

from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import NodeRid

__all__ = ["SWEEP_LEASES", "Janitor"]

_log = logging.getLogger("zlink_trio.runtime.remote")

SWEEP_LEASES = 30
"""The janitor's sweep runs every this many node leases (5 minutes at the default lease)."""


class Janitor:
    """This host's part in reclaiming what dead runs left (Rules 1, 2)."""

    def __init__(self, node: LocalNode, membership: Membership) -> None:
        self._node = node
        self._membership = membership

    def on_duty(self) -> bool:
        """Whether this host reclaims what peers left: the live member with the smallest RID."""
        own = self._node.node_rid.value
        return all(own < rid.value for rid in self._membership.peers())

    async def sweep_loop(self) -> None:
        """Every ``SWEEP_LEASES`` leases, reclaim what dead runs left while on duty (Rule 2)."""
        while True:
            await trio.sleep(SWEEP_LEASES * self._node.config.node_lease)
            if self.on_duty():
                await self.reclaim(None)

    async def reclaim(self, owner: NodeRid | None) -> None:
        """Delete what ``owner`` (any, for ``None``) left and nobody took (authority.py R. 6)."""
        try:
            removed = await self._node.authority.reclaim(owner)
        except ZLinkError as error:
            _log.warning("could not reclaim the records of %s: %s", owner, error)
            return
        if removed:
            _log.info("reclaimed %d records that %s left", removed, owner or "dead runs")
