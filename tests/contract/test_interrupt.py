"""SIGINT while a host is open: an orderly shutdown, then a plain KeyboardInterrupt; after the
last host, SIGINT is Trio's again (specs/shutdown.md SHUT-8.1..SHUT-8.3). The signal is raised in
this process (pytest-trio runs the test in the main thread); the cross-process test under store
load is tests/e2e/test_interrupt.py."""

from __future__ import annotations

import signal
import uuid

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
closings: list[zl.SpotCloseReason] = []


@app.message("sigint.Ping")
@attrs.frozen
class Ping:
    n: int


@app.user_spot("sigint.Room")
class Room(NoMembers):
    @zl.packet_handler(Ping)
    async def ping(self, msg: Ping) -> None:
        pass

    async def on_closing(self, context: zl.SpotClosingContext) -> None:
        closings.append(context.reason)


def config(store_dsn: str) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"sigint-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)


@pytest.mark.spec("SHUT-8.1", "SHUT-8.2")
async def test_sigint_shuts_the_hosts_down_in_order_then_raises_keyboard_interrupt(
    store_dsn: str,
) -> None:
    """Two hosts of this run, a SIGINT, and a second one while they shut down: the signal is not
    raised where the main task is, both hosts close their Spots with HOST_SHUTDOWN (on_closing
    ran), the block is cancelled, and a plain KeyboardInterrupt (no group) leaves
    ``open_host``."""
    closings.clear()
    seen: list[str] = []

    async def interrupted_block() -> None:
        async with zl.open_host(app, config(store_dsn)) as first:
            async with zl.open_host(app, config(store_dsn)) as second:
                for host in (first, second):
                    await host.spots.get_or_create(uuid.uuid4().hex, "sigint.Room").submit()
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)  # while shutting down: ignored
                # Not raised here, where the main task happens to be: a message to the hosts.
                seen.append("signalled")
                await trio.sleep_forever()
            seen.append("after the inner block")

    with pytest.raises(KeyboardInterrupt) as caught:
        await interrupted_block()
    assert type(caught.value) is KeyboardInterrupt
    assert ["signalled"] == seen
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] * 2 == closings


@pytest.mark.spec("SHUT-8.3")
async def test_after_the_last_host_the_sigint_handler_is_trios_again(store_dsn: str) -> None:
    """While hosts are open SIGINT has the run's receiver as its handler; once the last of two
    hosts has closed, the handler is again the one from before (Trio's, which raises
    KeyboardInterrupt), and not while one host is still open."""
    before = signal.getsignal(signal.SIGINT)
    async with zl.open_host(app, config(store_dsn)):
        async with zl.open_host(app, config(store_dsn)):
            assert signal.getsignal(signal.SIGINT) is not before
        assert signal.getsignal(signal.SIGINT) is not before
    await trio.lowlevel.checkpoint()  # the receiver's task closes it at its next turn
    assert signal.getsignal(signal.SIGINT) is before
