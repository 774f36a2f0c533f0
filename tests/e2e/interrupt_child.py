"""A host under store load, to be interrupted with SIGINT (the Ctrl-C test).

Run as ``python interrupt_child.py --dsn DSN --mesh M``: opens a host and keeps the store busy
(User Spots created and closed, requests to them) from four tasks, printing ``progress N`` after
every operation. On KeyboardInterrupt it prints ``clean exit`` and exits 130; anything else ends
it as Python would (a traceback, another status, or a crash).
"""

from __future__ import annotations

import argparse
import sys
import uuid

import attrs
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("interrupt.Ask")
@attrs.frozen
class Ask:
    n: int


@app.message("interrupt.Answer")
@attrs.frozen
class Answer:
    n: int


@app.user_spot("interrupt.Room")
class Room(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n)


async def load(host: zl.Host, worker: int, counter: list[int]) -> None:
    while True:
        spot_id = f"room-{worker}-{uuid.uuid4().hex[:8]}"
        created = await host.spots.get_or_create(spot_id, "interrupt.Room").submit()
        await host.route.request_to_spot(spot_id, Ask(counter[0]), reply_type=Answer).submit()
        await host.spots.close(created.spot_ref)
        counter[0] += 1
        print(f"progress {counter[0]}", flush=True)


async def main(dsn: str, mesh: str) -> None:
    config = zl.HostConfig(mesh=mesh, store_dsn=dsn)
    counter = [0]
    async with zl.open_host(app, config) as host, trio.open_nursery() as nursery:
        for worker in range(4):
            nursery.start_soon(load, host, worker, counter)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--mesh", required=True)
    args = parser.parse_args()
    try:
        trio.run(main, args.dsn, args.mesh)
    except KeyboardInterrupt:
        print("clean exit", flush=True)
        sys.exit(130)
