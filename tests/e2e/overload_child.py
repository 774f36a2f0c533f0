"""The owner host of the cross-process overload test, in its own process.

Run as ``python overload_child.py --mesh M --dsn DSN --slow S --quick Q [--lease SECONDS]``:
starts a host with a mailbox limit of 8 (and that node lease), creates the Spots ``S`` (stuck
until released) and ``Q``, prints
``{"ready": true}``, releases ``S`` when a line ``release`` arrives on stdin, and shuts down at
the end of input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import overload_app  # the script's own folder is first on sys.path
import trio

import zlink_trio as zl


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--slow", required=True)
    parser.add_argument("--quick", required=True)
    parser.add_argument("--lease", type=float, default=10.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = zl.HostConfig(
        mesh=args.mesh,
        store_dsn=args.dsn,
        node_rid="owner",
        mailbox_limit=8,
        node_lease=args.lease,
    )
    async with zl.open_host(overload_app.app, config) as host:
        await host.spots.get_or_create(args.slow, "ovle2e.Slow").submit()
        await host.spots.get_or_create(args.quick, "ovle2e.Quick").submit()
        print(json.dumps({"ready": True}), flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        while line := await stdin.receive_some():
            if b"release" in line:
                overload_app.release.set()
        await host.shutdown()


if __name__ == "__main__":
    trio.run(main)
