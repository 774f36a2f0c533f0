"""A small unit's payload travels inside its announcement (specs/relocation.md RELOC-71): one
``zlink.RelocateIn`` carries it and no ``zlink.RelocateChunk`` follows; a payload over one chunk
still goes in chunks (RELOC-46). Either way the state arrives whole."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()
CHUNK = 4096  # the source's relocation_payload_chunk_limit_bytes here


@app.message("rinline.Fill")
@attrs.frozen
class Fill:
    size: int


@app.message("rinline.Get")
@attrs.frozen
class Get:
    pass


@app.message("rinline.Data")
@attrs.frozen
class Data:
    data: bytes
    node: str


class Blob(zl.SpotRelocationAdapter["Holder"]):
    async def capture(self, target: Holder) -> bytes:
        return target.data

    async def restore(self, target: Holder, payload: bytes) -> None:
        target.data = payload


@app.user_spot("rinline.Holder", relocation=zl.preserve_state_with(Blob))
class Holder(NoMembers):
    def __init__(self) -> None:
        self.data = b""

    @zl.request_handler(Fill)
    async def fill(self, req: Fill) -> Data:
        self.data = os.urandom(req.size)
        return Data(self.data, self.context.ref.node_rid.value)

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Data:
        return Data(self.data, self.context.ref.node_rid.value)


@contextlib.asynccontextmanager
async def _pair(store_dsn: str) -> AsyncIterator[tuple[TestHost, TestHost]]:
    config = {"relocation_payload_chunk_limit_bytes": CHUNK}
    async with contextlib.AsyncExitStack() as stack:
        stores = await stack.enter_async_context(open_test_stores(store_dsn))
        source = await stack.enter_async_context(
            open_test_host(app, dsn=store_dsn, stores=stores, **config)
        )
        target = await stack.enter_async_context(
            open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh, **config)
        )
        with trio.fail_after(10):
            for one, other in ((source, target), (target, source)):
                await one.host._tree.membership.wait_for_peer(other.node_rid)  # type: ignore[union-attr]
        yield source, target


@pytest.mark.spec("RELOC-71", "RELOC-46")
@pytest.mark.parametrize(("size", "chunks_sent"), [(0, 0), (1024, 0), (3 * CHUNK + 5, 4)])
async def test_a_payload_of_one_chunk_travels_inside_the_announcement(
    store_dsn: str, size: int, chunks_sent: int
) -> None:
    """The source's requests while its host relocates: a payload that fits one chunk sends no
    ``RelocateChunk``; one of four chunks sends four. The data on the target is the data."""
    async with _pair(store_dsn) as (source, target):
        await source.spots.get_or_create("blob", "rinline.Holder").submit()
        filled = await source.route.request_to_spot("blob", Fill(size), reply_type=Data).submit()
        requests: list[str] = []
        node = source.host._node  # type: ignore[attr-defined]
        node.set_trace(lambda line: requests.append(line) if line.startswith("request ") else None)
        result = await source.host.relocate(deadline=20.0)
        node.set_trace(None)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        sent = [line.split()[1] for line in requests if " zlink.Relocate" in line]
        assert 1 == sent.count("zlink.RelocateIn"), sent
        assert chunks_sent == sent.count("zlink.RelocateChunk"), sent
        moved = await target.route.request_to_spot("blob", Get(), reply_type=Data).submit()
        assert (filled.data, target.node_rid.value) == (moved.data, moved.node)
