"""The self-fence of a node run, on a clock the test moves (specs/mesh.md MESH-20..MESH-22;
zlink_trio/_runtime/ownership/fence.py)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from zlink_trio._runtime.ownership.fence import Fence, fence_margin
from zlink_trio.errors import ErrorKind, ZLinkError

LEASE = 10.0


@pytest.mark.spec("MESH-20")
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
