"""Routing ids, Trio and the sockets, the transport's surface (TRN-1, TRN-8, TRN-9)."""

from __future__ import annotations

import inspect
import threading

import pytest
import trio
import trio.testing

import zlink_trio._integration.transport as transport
from tests.integration.transport.conftest import connect, node, numbered
from zlink_trio._integration.transport import RouteMesh, link_identity, routing_identity
from zlink_trio.ids import NodeGeneration, NodeRid


@pytest.mark.spec("TRN-1")
def test_routing_identity_has_one_bytes_form_per_run_and_each_link_its_own_id() -> None:
    """The run's routing identity is not zero-led and equal exactly for the same run; each link's
    routing id is bytes of at most 255: that identity and 16 random bytes, new for every link."""
    generation = NodeGeneration(7)
    longest = NodeRid("é" * 127)
    identity = routing_identity(longest, generation)
    assert type(identity) is bytes
    assert identity[0] != 0
    assert identity == routing_identity(NodeRid("é" * 127), NodeGeneration(7))
    assert identity != routing_identity(longest, NodeGeneration(8))
    assert identity != routing_identity(NodeRid("e"), generation)
    links = {link_identity(longest, generation) for _ in range(1_000)}
    assert 1_000 == len(links)
    for link in links:
        assert type(link) is bytes
        assert len(link) == len(identity) + 16 <= 255
        assert link.startswith(identity)


@pytest.mark.spec("TRN-8")
async def test_idle_and_waiting_meshes_leave_every_task_blocked_without_threads() -> None:
    """An idle mesh and a sender waiting at the HWM let Trio go quiet, and start no thread."""
    threads = threading.active_count()
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # a busy loop never lets go
            inbox.hold = trio.Event()
            async with trio.open_nursery() as nursery:

                async def fill() -> None:
                    for number in range(1_000):
                        await a.send(NodeRid("b"), numbered(number, 64 * 1024))

                nursery.start_soon(fill)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(NodeRid("b"))
                    assert threads == threading.active_count()
                finally:
                    inbox.hold.set()  # the shielded send waits: release it whatever happened
    assert threads == threading.active_count()


@pytest.mark.spec("TRN-9")
def test_the_transport_surface_names_no_zmq_type() -> None:
    """No public name or public signature of the transport mentions a pyzmq type."""
    items = [getattr(transport, name) for name in transport.__all__]
    items += [member for name, member in vars(RouteMesh).items() if not name.startswith("_")]
    items += [RouteMesh.__init__]
    texts = []
    for item in items:
        target = item.fget if isinstance(item, property) else item
        try:
            texts.append(str(inspect.signature(target)))
        except (TypeError, ValueError):  # an alias or a constant: its repr names its types
            texts.append(repr(target))
    assert len(texts) > 20
    assert [] == [text for text in texts if "zmq" in text]
