"""The ``zlink-trio demo`` command around one run (specs/demo.md DEMO-1, DEMO-5, DEMO-6).

``main`` resolves the store - ``--dsn``, else ``ZLINK_STORE_DSN``, else a temporary embedded
PostgreSQL in a folder of its own, stopped and removed at the end - and runs one ``Parent`` on
it. It owns the signals: the first Ctrl-C (SIGINT) or SIGTERM stops the workload and still runs
the ordered shutdown, then the demo exits 130; a second one kills the hosts still running. The
exit status is 0 only when every host exited 0 and no call failed, else 1. Its output closing
under it (``zlink-trio demo | head``) stops the workload the same way, and it exits 1 quietly
(DEMO-10).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO, cast

import trio

import zlink_trio as zl
from zlink_trio._demo.parent import Parent
from zlink_trio._demo.record import HostRecord

__all__ = ["EMBEDDED_START_TIMEOUT", "main"]

EMBEDDED_START_TIMEOUT = 60.0
"""Seconds the temporary embedded PostgreSQL gets to start, and to stop."""


class _Output(io.TextIOBase):
    """The demo's stdout. When its reader goes away, what is written after is dropped (the
    stream's descriptor then points at the null device, so nothing fails at exit either),
    ``gone`` is set and ``interrupted`` too: the workload stops as on Ctrl-C (DEMO-10)."""

    def __init__(self, stream: TextIO, interrupted: trio.Event) -> None:
        self._stream = stream
        self._interrupted = interrupted
        self.gone = False

    def isatty(self) -> bool:
        return self._stream.isatty()

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._lost()

    def _lost(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)
        self.gone = True
        self._interrupted.set()


async def _watch_signals(interrupted: trio.Event, hosts: Iterable[HostRecord]) -> None:
    """The first Ctrl-C (or SIGTERM) ends the workload and starts the ordered shutdown; a
    second one kills the hosts that are still running."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _signum in signals:
            if not interrupted.is_set():
                print("\ninterrupted: shutting every host down", file=sys.stderr, flush=True)
                interrupted.set()
                continue
            for host in hosts:
                if host.process is not None and host.returncode is None:
                    host.process.kill()


async def _demo(hosts: int, seconds: float, dsn: str | None, rolling_update: bool) -> int:
    from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

    interrupted = trio.Event()
    output = _Output(sys.stdout, interrupted)
    out = cast(TextIO, output)
    workdir = Path(tempfile.mkdtemp(prefix="zlink-demo-"))
    server: EmbeddedPostgres | None = None
    try:
        async with trio.open_nursery() as nursery:
            parent_hosts: list[HostRecord] = []
            nursery.start_soon(_watch_signals, interrupted, parent_hosts)
            dsn = dsn or os.environ.get(DSN_VARIABLE) or None
            if dsn is None:
                print(f"store: a temporary embedded PostgreSQL in {workdir}", file=out, flush=True)
                server = EmbeddedPostgres(workdir / "pgdata")
                dsn = await server.start(EMBEDDED_START_TIMEOUT)
            else:
                named = "store: the PostgreSQL named by --dsn / $ZLINK_STORE_DSN"
                print(named, file=out, flush=True)
            parent = Parent(hosts, seconds, dsn, workdir, out, rolling_update=rolling_update)
            parent_hosts.extend(parent.hosts)
            ok = await parent.run(interrupted)
            nursery.cancel_scope.cancel()
    finally:
        if server is not None:
            with trio.CancelScope(shield=True):
                await server.stop(EMBEDDED_START_TIMEOUT)
        shutil.rmtree(workdir, ignore_errors=True)
    if output.gone:
        return 1
    if interrupted.is_set():
        return 130
    return 0 if ok else 1


def main(*, hosts: int, seconds: float, dsn: str | None, rolling_update: bool = True) -> int:
    """``zlink-trio demo``: 0 when every host exited 0, no call failed and the rolling update
    (unless ``rolling_update`` is false) moved everything."""
    try:
        return trio.run(_demo, hosts, seconds, dsn, rolling_update)
    except (zl.ZLinkError, zl.ConfigurationError) as error:
        print(f"zlink-trio demo: {error}", file=sys.stderr)
        return 1
