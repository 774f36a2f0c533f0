"""The garbage collector during shutdown (specs/shutdown.md SHUT-4.16)."""

from __future__ import annotations

import gc
import uuid

import pytest

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.engines.heap import collector_paused

app = zl.Application()
seen_while_closing: list[bool] = []


@app.user_spot("heap.Room")
class Room(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        seen_while_closing.append(gc.isenabled())


@pytest.mark.spec("SHUT-4.16")
async def test_shutdown_pauses_the_collector_and_turns_it_back_on(store_dsn: str) -> None:
    """During shutdown (seen from on_closing) the cyclic collector is off; after it, on."""
    seen_while_closing.clear()
    assert gc.isenabled()
    config = zl.HostConfig(mesh=f"heap-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as host:
        await host.spots.get_or_create("room", "heap.Room").submit()
        await host.shutdown()
    assert [False] == seen_while_closing
    assert gc.isenabled()


@pytest.mark.spec("SHUT-4.16")
def test_a_process_with_the_collector_off_keeps_it_off() -> None:
    """The pause turns the collector back on only if it found it on."""
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.spec("SHUT-4.16", "RELOC-75")
def test_overlapping_pauses_turn_the_collector_on_when_the_last_ends() -> None:
    """A pause that ends while another still runs leaves the collector off."""
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()
