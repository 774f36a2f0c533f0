"""The line protocol between the demo and its hosts (specs/demo.md DEMO-1, DEMO-5, DEMO-6).

A host writes JSON objects on its stdout, one a line, each with an ``event``; the demo writes
bare commands on the host's stdin::

    host -> demo                            demo -> host
    ready    host up, every peer seen       go        set up: rooms, users, joins
    set      rooms owned, users joined      run       run the workload until ...
    stats    counts since the last stats    stop      ... stop, send the last stats
    stopped  the workload has ended         shutdown  host.shutdown(), then exit 0
    closed   the host has shut down         (end of input, SIGTERM: shut down as well)
    failed   what went wrong (then exit 1)

Each phase is a barrier over every host (``parent``), so no host addresses a room or a user
before it exists and none shuts down while another still sends to it. This module owns the two
halves both sides share: ``emit`` (one event) and ``lines`` (a byte stream read as lines).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import trio

__all__ = ["emit", "lines"]


def emit(event: str, **fields: object) -> None:
    """Write one event on stdout, as one JSON line, at once."""
    print(json.dumps({"event": event, **fields}), flush=True)


async def lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[str]:
    """The lines of ``stream`` as text, without their ends; the last one even without one."""
    buffer = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if buffer:
                yield buffer.decode("utf-8", "replace")
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode("utf-8", "replace").rstrip("\r")
