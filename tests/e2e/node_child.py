"""One host of the end-to-end app in its own process, driven by JSON lines on stdin/stdout.

Run as ``python node_child.py --mesh M --dsn DSN --rid R [--peers N] [--lease S]``. It starts a
host of ``e2e_app.app`` and, once that host lists ``N`` peers (``host.peers``), prints

    {"ready": true, "node_rid": R, "generation": G}

Then it reads one JSON command per line (``e2e_app.COMMANDS``: ``get_or_create``, ``request``,
``poke``, ``send_instance``, ``instance_order``, ``create_actor``, ``request_actor``, ``peers``)
and answers each with one JSON line, in order. ``{"op": "shutdown"}`` shuts the host down,
answers ``{"ok": true}`` and the process exits 0; end of input does the same without answering.
Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import e2e_app  # the script's own folder is first on sys.path
import trio

import zlink_trio as zl

POLL = 0.05


def say(answer: dict[str, Any]) -> None:
    print(json.dumps(answer), flush=True)


async def lines(stream: trio.lowlevel.FdStream) -> Any:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = await stream.receive_some()
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        if line.strip():
            yield json.loads(line)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rid", required=True)
    parser.add_argument("--peers", type=int, default=0)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--ready-timeout", type=float, default=30.0)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"[{args.rid}] %(name)s: %(message)s"
    )
    config = zl.HostConfig(
        mesh=args.mesh, store_dsn=args.dsn, node_rid=args.rid, node_lease=args.lease
    )
    async with zl.open_host(e2e_app.app, config) as host:
        e2e_app.started(host)
        with trio.fail_after(args.ready_timeout):
            while len(host.peers) < args.peers:  # noqa: ASYNC110  # the store has no local event
                await trio.sleep(POLL)
        say(
            {
                "ready": True,
                "node_rid": host.node_rid.value,
                "generation": str(host.node_generation.value),
            }
        )
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async for command in lines(stdin):
            if command["op"] == "shutdown":
                await host.shutdown()
                say({"ok": True})
                break
            say(await e2e_app.execute(host, command))
        await host.shutdown()


if __name__ == "__main__":
    trio.run(main)
