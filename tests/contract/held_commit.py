"""Holds a move right before its commit for the move tests (test_relocation_bounds.py,
test_actor_move.py): the unit sealed on the source and restored on the target, for as long as
a test needs to send to it there."""

from __future__ import annotations

from typing import Any

import trio

from zlink_trio.testing import TestHost


def hold_the_commit(source: TestHost) -> tuple[trio.Event, trio.Event]:
    """Stop ``source``'s next move right before its commit: ``reached`` is set there, and the
    move goes on once ``release`` is set."""
    reached, release = trio.Event(), trio.Event()
    authority = source.host._node.authority
    hand_over = authority.hand_over

    async def held_hand_over(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        await release.wait()
        return await hand_over(*args, **kwargs)

    authority.hand_over = held_hand_over
    return reached, release
