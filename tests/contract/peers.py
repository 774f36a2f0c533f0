"""Waiting, in a test, until one host knows another as a peer (its membership has the peer's
node record): the step before a test's first call between two hosts of a mesh."""

from __future__ import annotations

from typing import Any

import trio

from zlink_trio.testing import TestHost

MEET_TIMEOUT = 10.0
"""Seconds a host gets to learn of the other before the test fails."""


async def meet(one: TestHost, other: TestHost) -> None:
    """Return once ``one`` knows ``other`` as a peer."""
    membership: Any = one.host._tree.membership
    with trio.fail_after(MEET_TIMEOUT):
        await membership.wait_for_peer(other.node_rid)
