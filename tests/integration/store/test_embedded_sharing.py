"""One embedded PostgreSQL shared by its users, in one process and across processes
(specs/store.md STORE-36..STORE-38; embedded.py Rules 1-2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import StoreConfig, open_stores
from zlink_trio._integration.store.embedded import EmbeddedPostgres, live_users

START = 60.0

CHILD = textwrap.dedent(
    """
    import sys, trio
    from pathlib import Path
    from zlink_trio._integration.store import StoreConfig, open_stores

    async def main(data_dir: str, hold: str) -> None:
        config = StoreConfig(data_dir=Path(data_dir), startup_timeout=120)
        async with open_stores(config, environ={}) as stores:
            await stores.location.read("probe")
            print("READY", flush=True)
            if hold == "hold":
                await trio.sleep_forever()

    trio.run(main, sys.argv[1], sys.argv[2])
    """
)


def running(data_dir: Path) -> bool:
    """Whether the folder's server is up (its postmaster.pid names a live process)."""
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def answers(data_dir: Path) -> None:
    """A store opened on the folder's server runs a query (joins it, does not start it)."""
    config = StoreConfig(data_dir=data_dir, startup_timeout=START)
    async with open_stores(config, environ={}) as stores:
        await stores.location.read("probe")


@pytest.mark.spec("STORE-36")
async def test_two_users_in_one_process_the_server_stops_with_the_last(pg_folder: Path) -> None:
    """Two users of one folder in this process: the first leaving keeps the server up for the
    second (before, it stopped it under the second); the last leaving stops it."""
    data_dir = pg_folder / "pg"
    first, second = EmbeddedPostgres(data_dir), EmbeddedPostgres(data_dir)
    assert await first.start(START) == await second.start(START)
    await first.stop(START)
    assert running(data_dir)
    await answers(data_dir)
    assert running(data_dir)
    await second.stop(START)
    assert not running(data_dir)


@pytest.mark.spec("STORE-37")
async def test_a_killed_user_is_not_counted_and_the_last_live_one_stops_the_server(
    pg_folder: Path,
) -> None:
    """A child process joins the server and is killed with SIGKILL; this process's user, the
    last live one, stops the server when it leaves (before, the dead pid kept it running)."""
    data_dir = pg_folder / "pg"
    here = EmbeddedPostgres(data_dir)
    await here.start(START)
    child = subprocess.Popen(  # killed below; waited for in a thread
        [sys.executable, "-c", CHILD, str(data_dir), "hold"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        assert "READY" == line.strip()
        assert child.pid in live_users(data_dir)
        child.send_signal(signal.SIGKILL)
        await trio.to_thread.run_sync(child.wait)
        assert running(data_dir)
    finally:
        if child.poll() is None:
            child.kill()
        assert child.stdout is not None
        child.stdout.close()
    await here.stop(START)
    assert not running(data_dir)
    assert [] == live_users(data_dir)


@pytest.mark.spec("STORE-38")
async def test_parallel_processes_on_one_folder_all_succeed(pg_folder: Path) -> None:
    """Six processes start, use and leave one folder's server at the same time: every one
    succeeds (before, one leaving stopped the server under the others), and the server is
    stopped when the last has left."""
    data_dir = pg_folder / "pg"
    results: list[int] = []

    async def one() -> None:
        done = await trio.run_process(
            [sys.executable, "-c", CHILD, str(data_dir), "leave"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert b"READY" in done.stdout, done.stderr.decode()[-2000:]
        results.append(done.returncode)

    with trio.fail_after(300):
        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(one)
    assert [0] * 6 == results
    assert not running(data_dir)


@pytest.mark.spec("STORE-39")
def test_the_pools_reconnect_failures_are_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    """asyncpg's warning for a failed reconnect of its pool floor, logged as asyncpg logs it
    (with the exception), comes out as one line naming the cause, without a traceback."""
    import logging

    import zlink_trio._integration.store.bridge  # noqa: F401  # installs the filter

    try:
        raise ConnectionRefusedError(111, "Connect call failed")
    except ConnectionRefusedError:
        logging.getLogger("asyncpg.pool").warning(
            "Failed to restore the pool connection floor; retrying", exc_info=True
        )
    (record,) = [r for r in caplog.records if r.name == "asyncpg.pool"]
    text = logging.Formatter("%(levelname)s %(message)s").format(record)
    assert 1 == len(text.splitlines()), text
    assert "WARNING Failed to restore the pool connection floor; retrying" in text
    assert "ConnectionRefusedError" in text
