"""The host that strangers attack in the cross-process security test, in its own process.

Run as ``python security_child.py --mesh M --dsn DSN --room R``: starts a host with the default
transport security, creates the Spot ``R``, prints ``{"ready": true}`` and shuts down at the end
of its input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import security_app  # the script's own folder is first on sys.path
import trio

import zlink_trio as zl


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--room", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = zl.HostConfig(mesh=args.mesh, store_dsn=args.dsn, node_rid="owner")
    async with zl.open_host(security_app.app, config) as host:
        await host.spots.get_or_create(args.room, "sece2e.Room").submit()
        print(json.dumps({"ready": True}), flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        while await stdin.receive_some():
            pass
        await host.shutdown()


if __name__ == "__main__":
    trio.run(main)
