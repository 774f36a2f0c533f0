"""Ctrl-C is safe: SIGINT to a host under store load ends in an orderly shutdown and a plain
KeyboardInterrupt, every time (specs/shutdown.md SHUT-8.1, SHUT-8.2; issue 12, item 7).

Each run is a separate OS process (``interrupt_child.py``) that keeps the store busy; it is
interrupted after a number of operations that varies from run to run, so the signal lands in
different places. A clean run prints ``clean exit`` and exits 130; a crash (signal), a hang
(no exit within the bound), a traceback or another status is a failure.
"""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path

import pytest
import trio

HERE = Path(__file__).resolve().parent
RUNS = 50
AT_ONCE = 5
EXIT_BOUND = 60.0


async def interrupted_run(store_dsn: str, after: int) -> str | None:
    """One child interrupted after ``after`` operations; None when it ended cleanly, else what
    went wrong."""
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            str(HERE / "interrupt_child.py"),
            "--dsn",
            store_dsn,
            "--mesh",
            f"int-{uuid.uuid4().hex[:8]}",
        ],
        stdout=-1,
        stderr=-1,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    out = bytearray()
    err = bytearray()

    async def drain_stderr() -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.receive_some():
            err.extend(chunk)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain_stderr)
            with trio.move_on_after(EXIT_BOUND) as bound:
                while f"progress {after}\n".encode() not in out:
                    chunk = await process.stdout.receive_some()
                    if not chunk:
                        break
                    out.extend(chunk)
                process.send_signal(signal.SIGINT)
                while chunk := await process.stdout.receive_some():
                    out.extend(chunk)
                await process.wait()
            if bound.cancelled_caught:
                process.kill()
                await process.wait()
                return f"no exit within {EXIT_BOUND} s after SIGINT; stderr: {err[-1500:]!r}"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text, problems = err.decode(errors="replace"), []
    if process.returncode != 130:
        problems.append(f"exit status {process.returncode}")
    if b"clean exit" not in out:
        problems.append("no clean exit line")
    if "Traceback" in text or "TrioInternalError" in text:
        problems.append("a traceback")
    return None if not problems else f"{', '.join(problems)}; stderr: {text[-1500:]}"


@pytest.mark.spec("SHUT-8.1", "SHUT-8.2")
async def test_fifty_interrupts_under_store_load_are_fifty_clean_exits(store_dsn: str) -> None:
    """50 host processes, each interrupted with SIGINT after 1..50 store-heavy operations: every
    one exits 130 with its ``except KeyboardInterrupt`` reached, no traceback, no hang."""
    failures: list[str] = []
    limiter = trio.CapacityLimiter(AT_ONCE)

    async def one(after: int) -> None:
        async with limiter:
            problem = await interrupted_run(store_dsn, after)
        if problem is not None:
            failures.append(f"run interrupted after {after} operations: {problem}")

    async with trio.open_nursery() as nursery:
        for run in range(RUNS):
            nursery.start_soon(one, 1 + run)
    assert [] == failures
