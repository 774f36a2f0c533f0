"""Spots that send to their own id from a turn whose end the send would wait for, each run as a
process of its own by test_send_self_start.py (specs/completion.md CMP-7.12): were the send to
wait, this process would hang, and the test kills it rather than hang with it.

    python self_start.py DSN start-up   a User Spot's on_initialize sends to the Spot it creates
    python self_start.py DSN closing    an Instance Spot's on_closing sends to its next one
    python self_start.py DSN control    a PER_ACTOR Spot's on_actor_join sends to its own full
                                        mailbox (specs/decisions.md DEC-32)

It prints one JSON line: what the sends saw, and (start-up) the creation's status. Application
time is a VirtualClock that never moves, so no deadline ends a wait that should not be.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import ClassVar

import attrs
import trio

import zlink_trio as zl
from zlink_trio.testing import VirtualClock, open_test_host

app = zl.Application()
seen: list[str] = []
closed = trio.Event()


@app.message("self_start.Note")
@attrs.frozen
class Note:
    n: int


@app.message("self_start.Leave")
@attrs.frozen
class Leave:
    pass


async def _send_to_self(context: zl.SpotContext, instance: bool) -> None:
    call = context.route.send_to_spot(context.spot_id, Note(5))
    try:
        await (call.instance_spot("self_start.Leaving") if instance else call).submit()
    except zl.ZLinkError as error:
        seen.append(error.kind.name)
        print(error, file=sys.stderr)
    else:
        seen.append("admitted")


@app.user_spot("self_start.Selfish")
class Selfish(zl.Spot):
    """Sends to its own id from its start-up, before it is Ready."""

    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_initialize(self) -> None:
        await _send_to_self(self.context, instance=False)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        seen.append(f"handled {msg.n}")


@app.message("self_start.Go")
@attrs.frozen
class Go:
    spot: str


@app.actor("self_start.Player")
class Player(zl.Actor):
    @zl.packet_handler(Go)
    async def go(self, msg: Go) -> None:
        self.context.join_spot(msg.spot).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        seen.append(f"join {completion.outcome.name}")


@app.user_spot("self_start.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(zl.Spot):
    """Its on_actor_join (a control turn holding the Spot's gate) sends to the Spot itself more
    than its mailbox (limit 1) holds: only the end of that turn lets the Spot serve them."""

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        for n in range(3):
            await self.context.route.send_to_spot(self.context.spot_id, Note(n)).submit()
            seen.append(f"sent {n}")
        return zl.SpotActorJoinResult.accept(None)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        seen.append(f"handled {msg.n}")


@app.instance_spot("self_start.Leaving")
class Leaving(zl.InstanceSpot):
    """Sends to its own next incarnation from its on_closing."""

    closings: ClassVar[int] = 0

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        Leaving.closings += 1
        if Leaving.closings == 1:
            await _send_to_self(self.context, instance=True)
            closed.set()

    @zl.packet_handler(Leave)
    async def leave(self, msg: Leave) -> None:
        await self.context.close()

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        seen.append(f"handled {msg.n}")


async def main(dsn: str, case: str) -> None:
    clock = VirtualClock()
    clock.settle = trio.testing.wait_all_tasks_blocked
    config = {"mailbox_limit": 1} if case == "control" else {}
    async with open_test_host(app, dsn=dsn, clock=clock, **config) as host:
        if case == "control":
            await host.spots.get_or_create("l", "self_start.Lanes").submit()
            player = f"player-{uuid.uuid4().hex[:8]}"  # Actor ids are unique store-wide
            await host.actors.create(player, "self_start.Player").submit()
            await host.route.send_to_actor(player, Go("l")).submit()
            while len(seen) < 7:  # noqa: ASYNC110  # three sent, the join, three handled
                await trio.sleep(0.01)
            print(json.dumps({"seen": seen}), flush=True)
            return
        if case == "start-up":
            created = await host.spots.get_or_create("s", "self_start.Selfish").submit()
            await host.wait_quiet()
            print(json.dumps({"status": created.status.name, "seen": seen}), flush=True)
            return
        await host.route.send_to_spot("i", Leave()).instance_spot("self_start.Leaving").submit()
        await closed.wait()
        await host.wait_quiet()
        print(json.dumps({"seen": seen}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
