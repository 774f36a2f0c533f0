"""Ctrl-C during ``zlink-trio store inspect`` or ``store retire`` (specs/inspect.md INSPECT-7):
one line and exit status 130, no traceback, even while the command waits on the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import trio

from zlink_trio._integration.store import DSN_VARIABLE

COMMAND_TIMEOUT = 30.0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["inspect", "retire"])
@pytest.mark.spec("INSPECT-7")
async def test_a_signal_while_waiting_for_the_store_ends_the_command_in_one_line(
    command: str, signum: signal.Signals
) -> None:
    """The store is a socket that accepts and never answers, so the command waits inside its
    store start-up; once the command has connected, the signal ends it at once."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    dsn = f"postgresql://nobody@127.0.0.1:{port}/none"
    args = ["--mesh", "m"] if command == "retire" else []
    environ = {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "zlink_trio", "store", command, "--dsn", dsn, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
    )
    try:
        with trio.fail_after(COMMAND_TIMEOUT):
            connection = await listeners[0].accept()  # it waits for the server's answer now
            process.send_signal(signum)
            assert process.stderr is not None
            stderr = b""
            while chunk := await process.stderr.receive_some(4096):
                stderr += chunk
            returncode = await process.wait()
        await connection.aclose()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            for listener in listeners:
                await listener.aclose()
    text = stderr.decode()
    assert 130 == returncode, text
    assert text.startswith(f"zlink-trio store {command}: interrupted ({signum.name})"), text
    assert 1 == len(text.strip().splitlines()), text
    assert "Traceback" not in text
