"""The self-fence of a node run and the renewals that move it, on a clock the test moves
(specs/mesh.md MESH-3, MESH-20..MESH-22; zlink_trio/_runtime/ownership/fence.py, lease.py)."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime

import pytest
import trio
import trio.testing

from zlink_trio._integration.store import Applied, Batch, Conflict, Found, Missing
from zlink_trio._runtime.ownership.fence import Fence, fence_margin
from zlink_trio._runtime.ownership.lease import NodeLease
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid

LEASE = 10.0


@pytest.mark.spec("MESH-20", "DEC-22")
def test_the_margin_is_a_fifth_of_the_lease() -> None:
    assert 2.0 == fence_margin(10.0)
    assert 0.4 == fence_margin(2.0)


@pytest.mark.spec("MESH-20", "MESH-21")
async def test_a_run_serves_until_lease_minus_margin_after_its_renewal_began(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Before any renewal the run serves; after one that began at t it serves until exactly
    t + lease - margin, and refuses UNAVAILABLE from then on; a later renewal lifts it."""
    fence = Fence(LEASE)
    assert fence.serving
    assert math.inf == fence.until
    fence.check()
    started = trio.current_time()
    fence.renewed(started)
    assert started + 8.0 == fence.until
    mock_clock.jump(8.0 - 1e-6)
    assert fence.serving
    fence.check()
    mock_clock.jump(1e-6)
    assert not fence.serving
    with pytest.raises(ZLinkError) as refused:
        fence.check()
    assert ErrorKind.UNAVAILABLE == refused.value.kind
    assert "could not renew its lease" in refused.value.message
    assert fence.lost is None
    fence.renewed(trio.current_time())
    assert fence.serving


@pytest.mark.spec("MESH-21")
async def test_a_turn_waits_at_the_fence_until_a_renewal_lifts_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    """``wait_serving`` returns at once while serving, blocks past the fence and returns when
    a renewal moves it."""
    fence = Fence(LEASE)
    fence.renewed(trio.current_time())
    await fence.wait_serving()
    mock_clock.jump(9.0)
    passed: list[bool] = []

    async def turn() -> None:
        await fence.wait_serving()
        passed.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn)
        await trio.testing.wait_all_tasks_blocked()
        assert [] == passed
        fence.renewed(trio.current_time())
    assert [True] == passed


@pytest.mark.spec("MESH-22")
async def test_a_lost_lease_is_lost_for_good(mock_clock: trio.testing.MockClock) -> None:
    """After ``lose`` the run never serves again, a renewal changes nothing, the refusal says
    why, and a turn waiting at the fence waits until it is cancelled."""
    fence = Fence(LEASE)
    fence.renewed(trio.current_time())
    fence.lose("the record was removed")
    assert "the record was removed" == fence.lost
    assert not fence.serving
    fence.renewed(trio.current_time())
    assert not fence.serving
    with pytest.raises(ZLinkError) as refused:
        fence.check()
    assert ErrorKind.UNAVAILABLE == refused.value.kind
    assert "this host's run has ended: the record was removed" == refused.value.message
    fence.lose("a second reason")
    assert "the record was removed" == fence.lost
    mock_clock.autojump_threshold = 0  # nothing else runs: an hour passes at once
    with trio.move_on_after(3600) as waited:
        await fence.wait_serving()
    assert waited.cancelled_caught


class _FailingRenewals:
    """A Location Store stand-in for one lease: records when each write was tried, and answers
    ``UNAVAILABLE`` to the writes whose number is in ``failing``. The lease's timing is tested on
    a clock the test moves, which a real server's answers cannot follow; it is passed where the
    lease takes its ``LocationStore`` (no interface in the runtime for it, BND-1.12), and the
    lease against the real store is tests/runtime/test_membership.py's."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.tried: list[float] = []
        self.delay = 0.0
        """How long each write takes."""
        self._version = 0

    async def read(self, key: str) -> Missing | Found:
        raise AssertionError("a renewal that succeeds or is unavailable reads nothing")

    async def write(self, batch: Batch) -> Applied | Conflict:
        self.tried.append(trio.current_time())
        await trio.sleep(self.delay)
        if len(self.tried) in self.failing:
            raise ZLinkError(ErrorKind.UNAVAILABLE, "test outage")
        self._version += 1
        return Applied((self._version,), datetime.now(UTC))


def _lease(store: _FailingRenewals, fence: Fence | None = None) -> NodeLease:
    """A lease of node ``n1`` in mesh ``m`` on ``store``, renewed every 3 s."""
    record = NodeRecord(NodeRid("n1"), NodeGeneration.new())
    return NodeLease(
        store,
        MeshName("m"),
        "m/m/node/n1",
        record,
        lease=LEASE,
        renew_every=3.0,
        fence=Fence(LEASE) if fence is None else fence,
    )


@pytest.mark.spec("MESH-3")
async def test_a_failed_renewal_is_tried_again_sooner_than_the_renewal_interval(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Renewals follow every ``renew_every``; after an UNAVAILABLE one the next try comes after
    (lease + margin) / 20, and once one succeeds the interval is ``renew_every`` again."""
    mock_clock.autojump_threshold = 0
    store = _FailingRenewals(failing={2, 3})
    lease = _lease(store)
    await lease.publish(first=True)
    with trio.move_on_after(3.0 + 0.6 + 0.6 + 3.0 + 1.0):
        await lease.renew_loop()
    gaps = [round(later - earlier, 6) for earlier, later in itertools.pairwise(store.tried)]
    assert [3.0, 0.6, 0.6, 3.0] == gaps  # (10 + 2) / 20 = 0.6 after each failure


@pytest.mark.spec("MESH-14")
async def test_a_new_load_waits_for_the_renewal_while_a_new_state_is_written_at_once(
    mock_clock: trio.testing.MockClock,
) -> None:
    """On a clock the test moves: a load change writes nothing until the next renewal, which
    carries it; a state change is written at once."""
    mock_clock.autojump_threshold = 0
    store = _FailingRenewals(failing=set())
    written: list[tuple[float, NodeRecord]] = []
    write = store.write

    async def recording(batch: Batch) -> Applied | Conflict:
        written.append((trio.current_time(), NodeRecord.decode(batch.mutations[0].value)))  # type: ignore[union-attr]  # a lease only puts
        return await write(batch)

    store.write = recording  # type: ignore[method-assign]  # the test records the writes
    lease = _lease(store)
    await lease.publish(first=True)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lease.renew_loop)
        await trio.sleep(1.0)
        lease.revise({"load": 7})
        await trio.sleep(1.5)
        assert 1 == len(written)  # only the first publish, at start
        await trio.sleep(1.0)
        assert [(start + 3.0, 7)] == [(when, rec.load) for when, rec in written[1:]]
        lease.revise({"state": "draining"})
        await trio.sleep(0.1)
        assert (start + 3.5, "draining") == (written[-1][0], written[-1][1].state)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-20")
async def test_the_fence_counts_from_when_the_renewal_began_not_when_it_answered(
    mock_clock: trio.testing.MockClock,
) -> None:
    """A publish whose write takes 3 s moves the fence to its start + lease - margin: the
    database may have stamped the record at any moment of those 3 s."""
    mock_clock.autojump_threshold = 0
    store = _FailingRenewals(failing=set())
    store.delay = 3.0
    fence = Fence(LEASE)
    lease = _lease(store, fence)
    began = trio.current_time()
    await lease.publish(first=True)
    assert began + 3.0 == trio.current_time()
    assert began + LEASE - fence_margin(LEASE) == fence.until


@pytest.mark.spec("RELOC-72")
async def test_published_returns_once_a_successful_write_carried_the_change(
    mock_clock: trio.testing.MockClock,
) -> None:
    """On a clock the test moves, writes taking 2 s: a state change's first write fails, the
    retry 0.6 s later lands; ``published()`` returns when that retry landed, not at the failed
    write, and a load change alone leaves nothing to wait for."""
    mock_clock.autojump_threshold = 0
    store = _FailingRenewals(failing={2})
    lease = _lease(store)
    await lease.publish(first=True)
    store.delay = 2.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lease.renew_loop)
        lease.revise({"load": 3})
        began = trio.current_time()
        await lease.published()
        assert began == trio.current_time()  # nothing urgent was waiting
        lease.revise({"state": "relocating"})
        await lease.published()
        assert began + 2.0 + 0.6 + 2.0 == trio.current_time()
        assert [began, began + 2.6] == store.tried[1:]
        nursery.cancel_scope.cancel()
