"""Sends to a host whose process is stopped (SIGSTOP) wait at the application connection's
high-water mark, across processes (specs/completion.md CMP-17.2, CMP-15.3).

The owner host runs in a process of its own (``overload_child.py``); this
process sends it ``Bulk`` messages of 4 KiB one after another while it is stopped, so its
reader reads nothing, the kernel's buffers fill, then ZeroMQ's queue, and a send waits for
capacity (TRN-11) - with no Pause from the owner, which cannot run. The test waits for that
state itself (a sender waiting on the link), never for a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

import zlink_trio as zl
from tests.e2e import overload_app
from tests.e2e.harness import until_ready

CHILD = Path(__file__).resolve().parent / "overload_child.py"
PAYLOAD = b"b" * 4096
AFTER = 50
"""Sends made after the wait, once the owner runs again."""
REQUEST_TIMEOUT = 1.0
"""The sender's request timeout: a send that ended by elapsed time would end within it."""


async def start_owner(mesh: str, dsn: str, lease: float) -> trio.Process:
    """The owner host's process, once its Spots ``s`` and ``q`` exist. ``lease``: its node
    lease, which a stop must not outlast when the owner is to serve again (a host that could
    not renew it serves nothing until it does)."""
    arguments = ["--mesh", mesh, "--dsn", dsn, "--slow", "s", "--quick", "q", "--lease", str(lease)]
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    await until_ready(process)
    return process


async def waiting_at_the_mark(host: zl.Host) -> None:
    """Return once a send of ``host`` waits for capacity on its link to the owner."""
    mesh: Any = host._messaging.remote.mesh  # type: ignore[attr-defined]
    link = mesh._links[zl.NodeRid("owner")].application
    while not link.waiting:  # noqa: ASYNC110  # a state of the transport, no event to wait on
        await trio.sleep(0.01)


async def all_handled(host: zl.Host, count: int) -> list[int]:
    """The numbers of the ``Bulk`` messages ``q`` handled, once it handled ``count``. What
    reached it at once fills its mailbox (limit 8), where a request is refused UNAVAILABLE
    (OVL-1) until the backlog drains: asked again then."""
    while True:
        ask = host.route.request_to_spot("q", overload_app.Ask(1), reply_type=overload_app.Answer)
        try:
            handled = (await ask.timeout(10).submit()).noted
        except zl.ZLinkError as error:
            if error.kind is not zl.ErrorKind.UNAVAILABLE:
                raise
            handled = []
        if len(handled) >= count:
            return handled
        await trio.sleep(0.05)


class Flood:
    """Sends ``Bulk(n)`` with n = 0, 1, 2, ... one after another until ``limit``."""

    def __init__(self, host: zl.Host) -> None:
        self.host = host
        self.submitted = 0
        self.limit: float = float("inf")
        self.ended: list[object] = []

    async def run(self) -> None:
        try:
            while self.submitted < self.limit:
                call = self.host.route.send_to_spot("q", overload_app.Bulk(self.submitted, PAYLOAD))
                await call.submit()
                self.submitted += 1
        except zl.ZLinkError as error:
            self.ended.append(error.kind)
        else:
            self.ended.append("done")


@pytest.mark.spec("CMP-17.2", "CMP-15.3")
async def test_sends_to_a_stopped_host_wait_at_the_mark_and_go_once_it_runs(
    store_dsn: str,
) -> None:
    """While the owner is stopped a send waits at the high-water mark past every time bound of
    the sender (three request timeouts), and so does ``submit_sync()`` on an application
    thread; once the owner runs again every send, the waiting ones included, is handled
    exactly once and in order."""
    mesh = f"hwm-{uuid.uuid4().hex[:8]}"
    owner = await start_owner(mesh, store_dsn, lease=30.0)
    try:
        config = zl.HostConfig(
            mesh=mesh, store_dsn=store_dsn, node_rid="sender", request_timeout=REQUEST_TIMEOUT
        )
        async with zl.open_host(overload_app.app, config) as host:
            ask = host.route.request_to_spot(
                "q", overload_app.Ask(0), reply_type=overload_app.Answer
            )
            assert [] == (await ask.timeout(10).submit()).noted
            flood = Flood(host)
            synced: list[str] = []
            os.kill(owner.pid, signal.SIGSTOP)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(flood.run)
                    with trio.fail_after(60):
                        await waiting_at_the_mark(host)
                    waited_at = flood.submitted
                    sync_call = host.route.send_to_spot("q", overload_app.Bulk(-1, PAYLOAD))

                    def blocking() -> None:
                        sync_call.submit_sync()
                        synced.append("returned")

                    nursery.start_soon(trio.to_thread.run_sync, blocking)
                    await trio.sleep(3 * REQUEST_TIMEOUT)  # the claim: time passes, nothing ends
                    assert waited_at == flood.submitted
                    assert [] == flood.ended
                    assert [] == synced
                    flood.limit = waited_at + AFTER
                    os.kill(owner.pid, signal.SIGCONT)
            finally:
                os.kill(owner.pid, signal.SIGCONT)
            assert ["done"] == flood.ended
            assert ["returned"] == synced
            with trio.fail_after(60):
                handled = await all_handled(host, int(flood.limit) + 1)
            assert sorted(handled) == [-1, *range(int(flood.limit))]
            assert [n for n in handled if n >= 0] == list(range(int(flood.limit)))
    finally:
        with trio.move_on_after(30) as bounded:
            if owner.stdin is not None:
                await owner.stdin.aclose()
            await owner.wait()
        if bounded.cancelled_caught:
            owner.kill()


@pytest.mark.spec("CMP-17.2")
async def test_a_send_waiting_at_the_mark_ends_unavailable_when_its_host_is_gone(
    store_dsn: str,
) -> None:
    """A send waiting at the high-water mark of a stopped owner ends UNAVAILABLE once the owner
    is killed (seed 002 §7: its target is gone), and the sends after it find no route."""
    mesh = f"hwm-{uuid.uuid4().hex[:8]}"
    owner = await start_owner(mesh, store_dsn, lease=2.0)
    try:
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_rid="sender")
        async with zl.open_host(overload_app.app, config) as host:
            ask = host.route.request_to_spot(
                "q", overload_app.Ask(0), reply_type=overload_app.Answer
            )
            await ask.timeout(10).submit()
            flood = Flood(host)
            os.kill(owner.pid, signal.SIGSTOP)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood.run)
                with trio.fail_after(60):
                    await waiting_at_the_mark(host)
                owner.kill()
                with trio.fail_after(60):
                    while not flood.ended:  # noqa: ASYNC110  # the flood's end is the event
                        await trio.sleep(0.05)
            assert [zl.ErrorKind.UNAVAILABLE] == flood.ended
    finally:
        owner.kill()
        await owner.wait()
