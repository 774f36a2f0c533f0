"""Forces RELOC-60's interleaving for the move tests (test_spot_move.py, test_actor_move.py): a
sender on the target reaches the moved unit after the target took the commit and before the
source's relay of what waited at the seal arrives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from zlink_trio._runtime.host import cutover
from zlink_trio.testing import TestHost


def send_early_after_commit(
    monkeypatch: pytest.MonkeyPatch,
    target: TestHost,
    nursery: trio.Nursery,
    send: Callable[[], Awaitable[object]],
) -> None:
    """Once ``target``'s reader takes the move's commit, ``send`` runs on the target (a sender
    there that never sent the unit anything, so no old route holds it back: RELOC-70); the
    source relays nothing before ``send`` has been admitted."""
    arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]
    commit, relay = arrivals.commit, cutover.relay
    sent = trio.Event()

    async def send_early() -> None:
        target.host._messaging.reroutes._previous.clear()  # type: ignore[attr-defined]
        await send()
        sent.set()

    def commit_then_send(source_rid: Any, unit: Any, message: Any) -> Any:
        answer = commit(source_rid, unit, message)
        nursery.start_soon(send_early)
        return answer

    async def relay_after_it(*args: Any, **kwargs: Any) -> None:
        await sent.wait()
        await relay(*args, **kwargs)

    arrivals.commit = commit_then_send
    monkeypatch.setattr(cutover, "relay", relay_after_it)
