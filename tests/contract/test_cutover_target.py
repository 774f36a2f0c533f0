"""A move over its operational target is reported and nothing else (specs/relocation.md RELOC-31;
host/cutover.py Rule 2): timed on the source from the start of its seal to its commit or abort,
one over ``HostConfig.relocation_cutover_target`` is logged as a warning, and the move commits or
is given up exactly as it would have been."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.contract.peers import meet
from zlink_trio.testing import open_test_host, open_test_stores

app = zl.Application()

HELD = 0.005
"""How long every capture of these tests takes: the move's seal lasts at least this long."""


@app.message("cut.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("cut.Get")
@attrs.frozen
class Get:
    pass


@app.message("cut.Count")
@attrs.frozen
class Count:
    value: int
    node: str


class SlowState(zl.ActorRelocationAdapter["Slow"]):
    async def capture(self, target: Slow) -> bytes:
        await trio.sleep(HELD)  # a state that takes its time to write down
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Slow, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


class FailingState(zl.ActorRelocationAdapter["Failing"]):
    async def capture(self, target: Failing) -> bytes:
        await trio.sleep(HELD)
        raise RuntimeError("this state cannot be written down")

    async def restore(self, target: Failing, payload: bytes) -> None:
        raise AssertionError("never captured, so never restored")


class Tally:
    context: Any

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, self.context.ref.node_rid.value)


@app.actor("cut.Slow", relocation=zl.preserve_state_with(SlowState))
class Slow(Tally, zl.Actor):
    pass


@app.actor("cut.Failing", relocation=zl.preserve_state_with(FailingState))
class Failing(Tally, zl.Actor):
    pass


def _reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "zlink_trio.runtime.relocation"
        and record.levelno == logging.WARNING
        and "operational target" in record.getMessage()
    ]


@pytest.mark.spec("RELOC-31")
@pytest.mark.parametrize("target_seconds", [HELD / 5, 3600.0])
async def test_a_move_over_its_target_is_reported_and_commits_all_the_same(
    store_dsn: str, caplog: pytest.LogCaptureFixture, target_seconds: float
) -> None:
    """An Actor whose capture takes ``HELD``: with a target below that its move is reported
    once, naming it, the target and the commit, and it moves with its state as with a target
    far above, where nothing is reported."""
    caplog.set_level(logging.WARNING, "zlink_trio.runtime.relocation")
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, relocation_cutover_target=target_seconds
        ) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.actors.create("a-1", "cut.Slow").submit()
        await source.route.send_to_actor("a-1", Add(7)).submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        count = await target.route.request_to_actor("a-1", Get(), reply_type=Count).submit()
        assert Count(7, target.node_rid.value) == count
        reports = _reports(caplog)
        if target_seconds > HELD:
            assert [] == reports
        else:
            assert 1 == len(reports), reports
            assert "a-1" in reports[0]
            assert str(target.node_rid) in reports[0]
            assert "committed" in reports[0]


@pytest.mark.spec("RELOC-31")
async def test_a_move_given_up_over_its_target_is_reported_and_serves_on(
    store_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An Actor whose capture fails after ``HELD``, with a target below that: the move is given
    up as it would be (BLOCKED, the Actor serves on the source with its state) and reported."""
    caplog.set_level(logging.WARNING, "zlink_trio.runtime.relocation")
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, relocation_cutover_target=HELD / 5
        ) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.actors.create("f-1", "cut.Failing").submit()
        await source.route.send_to_actor("f-1", Add(4)).submit()
        result = await source.host.relocate(deadline=20.0)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.STATE_INCOMPATIBLE) == (
            result.outcome,
            result.reason,
        )
        count = await target.route.request_to_actor("f-1", Get(), reply_type=Count).submit()
        assert Count(4, source.node_rid.value) == count
        reports = _reports(caplog)
        assert 1 == len(reports), reports
        assert "f-1" in reports[0]
        assert "given up" in reports[0]


@pytest.mark.spec("RELOC-31")
def test_the_cutover_target_is_checked_with_the_config() -> None:
    """One second by default; it takes a finite number of seconds greater than zero."""
    assert 1.0 == zl.HostConfig(mesh="m").relocation_cutover_target
    for bad in (0, -1.0, float("inf"), "1"):
        with pytest.raises(zl.ConfigurationError, match="relocation_cutover_target"):
            zl.HostConfig(mesh="m", relocation_cutover_target=bad)  # type: ignore[arg-type]
