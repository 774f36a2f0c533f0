"""One slow Spot never stalls its host, across processes (specs/overload.md OVL-1; issue 12,
item 1). The owner host runs in a process of its own (``overload_child.py``) with a mailbox limit
of 8; this process floods its stuck Spot with one-way messages, then asks its other Spot."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio

import zlink_trio as zl
from tests.e2e import overload_app
from tests.e2e.harness import until_ready

CHILD = Path(__file__).resolve().parent / "overload_child.py"
NOTES = 200
"""Fewer than the 256 waiting messages that pause a sender (OVL-2): this test floods and then
asks from one task, so a pause would hold the flood until the release that follows it."""


@pytest.mark.spec("OVL-1")
async def test_a_flooded_stuck_spot_in_another_process_stalls_nothing_else(
    store_dsn: str,
) -> None:
    """200 notes to a Spot whose handler is stuck (its mailbox holds 8): requests to the
    owner's other Spot are answered, a request to the stuck one is refused UNAVAILABLE in well
    under its timeout, and once released every note is handled, in order."""
    mesh = f"ovl-{uuid.uuid4().hex[:8]}"
    slow, quick = f"slow-{uuid.uuid4().hex[:6]}", f"quick-{uuid.uuid4().hex[:6]}"
    arguments = ["--mesh", mesh, "--dsn", store_dsn, "--slow", slow, "--quick", quick]
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        await until_ready(process)
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_rid="sender")
        async with zl.open_host(overload_app.app, config) as host:
            with trio.fail_after(60):
                for n in range(NOTES):
                    await host.route.send_to_spot(slow, overload_app.Note(n)).submit()
                for n in range(5):
                    ask = host.route.request_to_spot(
                        quick, overload_app.Ask(n), reply_type=overload_app.Answer
                    )
                    assert n == (await ask.timeout(3).submit()).n
                started = trio.current_time()
                stuck = host.route.request_to_spot(
                    slow, overload_app.Ask(0), reply_type=overload_app.Answer
                )
                with pytest.raises(zl.ZLinkError) as refused:
                    await stuck.timeout(5).submit()
                assert zl.ErrorKind.UNAVAILABLE == refused.value.kind
                assert trio.current_time() - started < 1.0
                await process.stdin.send_all(b"release\n")
                while True:  # the Spot refuses requests while notes still wait for it
                    ask = host.route.request_to_spot(
                        slow, overload_app.Ask(1), reply_type=overload_app.Answer
                    )
                    try:
                        answer = await ask.timeout(3).submit()
                    except zl.ZLinkError as error:
                        if error.kind is not zl.ErrorKind.UNAVAILABLE:
                            raise
                        await trio.sleep(0.05)
                        continue
                    if len(answer.noted) == NOTES:
                        break
                    await trio.sleep(0.05)
            assert list(range(NOTES)) == answer.noted
            await host.shutdown()
        await process.stdin.aclose()
        with trio.fail_after(30):
            assert 0 == await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
