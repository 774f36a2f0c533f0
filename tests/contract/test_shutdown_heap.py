"""The garbage collector during shutdown (specs/shutdown.md SHUT-4.16)."""

from __future__ import annotations

import gc
import uuid

import pytest

import zlink_trio as zl
from zlink_trio._runtime.engines.heap import old_objects_frozen

app = zl.Application()
seen_while_closing: list[int] = []


@app.user_spot("heap.Room")
class Room(zl.Spot):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        seen_while_closing.append(gc.get_freeze_count())


@pytest.mark.spec("SHUT-4.16")
async def test_shutdown_freezes_the_old_heap_and_thaws_it_after(store_dsn: str) -> None:
    """During shutdown (seen from on_closing) the objects that existed are frozen; after it,
    nothing is frozen any more."""
    seen_while_closing.clear()
    assert 0 == gc.get_freeze_count()
    config = zl.HostConfig(mesh=f"heap-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as host:
        await host.spots.get_or_create("room", "heap.Room").submit()
        await host.shutdown()
    assert 1 == len(seen_while_closing)
    assert seen_while_closing[0] > 1000  # the host, its store, its Spot, the test's objects
    assert 0 == gc.get_freeze_count()


@pytest.mark.spec("SHUT-4.16")
def test_a_process_that_froze_or_disabled_the_collector_is_left_as_it_is() -> None:
    """The freeze is skipped when objects are frozen already (the process's own freeze is not
    undone) or the collector is off (it stays off)."""
    with old_objects_frozen():
        assert gc.get_freeze_count() > 0
    assert 0 == gc.get_freeze_count()
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        with old_objects_frozen():
            pass
        assert mine == gc.get_freeze_count()
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with old_objects_frozen():
            assert 0 == gc.get_freeze_count()
        assert not gc.isenabled()
    finally:
        gc.enable()
