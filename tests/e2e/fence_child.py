"""Host ``b`` of the fencing history test in its own process (tests/e2e/test_fencing.py).

Run as ``python fence_child.py --mesh M --dsn DSN --rid R --lease S --ids a,b,c --history F``.
It starts a host of ``fence_app.app``, creates the User Spots ``ids`` on itself, prints

    {"ready": true, "generation": G, "refs": {id: object generation}}

and then keeps sending ``Note``s to its own Spots (local callers keep calling, whatever the
store does), with seqs from 1_000_000_000 up so they never meet the test's. When its run ends
by itself (it lost its lease) it prints ``{"ended": "<error>"}`` and exits 3; end of input
shuts it down and exits 0. Every handled message goes to the history file ``F``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys

import fence_app  # the script's own folder is first on sys.path
import trio

import zlink_trio as zl

LOCAL_SEQ = 1_000_000_000


def say(answer: object) -> None:
    print(json.dumps(answer), flush=True)


async def local_traffic(host: zl.Host, ids: list[str]) -> None:
    seq = LOCAL_SEQ
    while True:
        for spot_id in ids:
            seq += 1
            # Fenced or closed: the call says so, and nothing is handled.
            with contextlib.suppress(zl.ZLinkError):
                await host.route.send_to_spot(spot_id, fence_app.Note(seq)).submit()
        await trio.sleep(0.01)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rid", required=True)
    parser.add_argument("--lease", type=float, required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--history", required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"[{args.rid}] %(name)s: %(message)s"
    )
    fence_app.sink = fence_app.file_sink(args.history)
    ids = args.ids.split(",")
    config = zl.HostConfig(
        mesh=args.mesh, store_dsn=args.dsn, node_rid=args.rid, node_lease=args.lease
    )
    try:
        async with zl.open_host(fence_app.app, config) as host:
            refs = {}
            for spot_id in ids:
                created = await host.spots.get_or_create(spot_id, "fence.Counter").submit()
                refs[spot_id] = created.spot_ref.object_generation.value
            say({"ready": True, "generation": str(host.node_generation.value), "refs": refs})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(local_traffic, host, ids)
                stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
                while await stdin.receive_some():
                    pass
                nursery.cancel_scope.cancel()
    except zl.ZLinkError as error:
        say({"ended": f"{error.kind.name}: {error}"})
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
