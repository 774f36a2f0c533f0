"""A turn's one-way send to a queue that only its own end can empty (specs/decisions.md DEC-32;
routing/local.py Rule 4).

With ``mailbox_limit=2`` (or ``app_job_queue_size=2``) a turn sends five messages to its own
Spot (SPOT_WIDE or PER_ACTOR) or Actor, a member Actor of a SPOT_WIDE Spot to that Spot, or the
Spot to its member (their turns share one gate): each send is admitted at once past the limit,
and every message is handled once, in order, after the sending turn. Without the rule the third
send waits for room (or a permit) that only the sending turn's end would free, until the host
shuts down. A send from a turn to another Spot whose queue is full still waits for room
(CMP-5.1).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from zlink_trio.testing import TestHost, open_test_host

app = zl.Application()
log: list[str] = []
COUNT = 5
"""Messages a turn sends; more than ``mailbox_limit`` (2) can hold."""


class Gate:
    release = trio.Event()


@pytest.fixture(autouse=True)
def reset() -> None:
    """Fresh records and events for each test (each runs its own Trio loop)."""
    log.clear()
    Gate.release = trio.Event()


@app.message("own.Note")
@attrs.frozen
class Note:
    n: int


@app.message("own.Burst")
@attrs.frozen
class Burst:
    to: str
    """``"self"``: the sender's own Spot or Actor; ``"spot"``: an Actor's Spot; ``"actor:<id>"``:
    that Actor; else a Spot id."""


@app.message("own.Enter")
@attrs.frozen
class Enter:
    spot: str


@app.message("own.Block")
@attrs.frozen
class Block:
    pass


@app.user_spot("own.Room")
class Room(zl.Spot):
    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        return zl.SpotActorJoinResult.accept(None)

    @zl.packet_handler(Burst)
    async def burst(self, msg: Burst) -> None:
        route = self.context.route
        to = self.context.spot_id.value if msg.to == "self" else msg.to
        for n in range(1, COUNT + 1):
            if to.startswith("actor:"):
                await route.send_to_actor(to.removeprefix("actor:"), Note(n)).submit()
            else:
                await route.send_to_spot(to, Note(n)).submit()
        log.append("sent")

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        log.append(f"{self.context.spot_id.value}:{msg.n}")

    @zl.packet_handler(Block)
    async def block(self, msg: Block) -> None:
        await Gate.release.wait()


@app.user_spot("own.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(Room):
    """Its own turns run on a lane of their own, holding no shared gate."""


@app.actor("own.Player")
class Player(zl.Actor):
    @zl.packet_handler(Enter)
    async def enter(self, msg: Enter) -> None:
        self.context.join_spot(msg.spot).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        log.append("joined")

    @zl.packet_handler(Burst)
    async def burst(self, msg: Burst) -> None:
        route = self.context.route
        for n in range(1, COUNT + 1):
            if msg.to == "self":
                await route.send_to_actor(self.context.actor_id, Note(n)).submit()
            else:
                await route.send_to_spot(self.context.spot_id, Note(n)).submit()
        log.append("sent")

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        log.append(f"{self.context.actor_id.value}:{msg.n}")


async def until_logged(entry: str) -> None:
    with trio.fail_after(10):
        while entry not in log:
            await trio.testing.wait_all_tasks_blocked()


def _spot_to_itself(type_name: str, spot: str) -> Callable[[TestHost], Awaitable[str]]:
    async def case(host: TestHost) -> str:
        await host.spots.get_or_create(spot, type_name).submit()
        await host.route.send_to_spot(spot, Burst("self")).submit()
        return spot

    return case


PLAYER = f"p-{uuid.uuid4().hex[:8]}"
"""The Actor's id: unique per run, since Actor ids are store-wide and these hosts use the
default store, where an earlier run (or anything else) may have left a ``p``."""


async def _actor_to_itself(host: TestHost) -> str:
    await host.actors.create(PLAYER, "own.Player").submit()
    await host.route.send_to_actor(PLAYER, Burst("self")).submit()
    return PLAYER


async def _with_a_member(host: TestHost) -> None:
    await host.spots.get_or_create("room", "own.Room").submit()
    await host.actors.create(PLAYER, "own.Player").submit()
    await host.route.send_to_actor(PLAYER, Enter("room")).submit()
    await until_logged("joined")


async def _member_to_its_spot(host: TestHost) -> str:
    await _with_a_member(host)
    await host.route.send_to_actor(PLAYER, Burst("spot")).submit()
    return "room"


async def _spot_to_its_member(host: TestHost) -> str:
    await _with_a_member(host)
    await host.route.send_to_spot("room", Burst(f"actor:{PLAYER}")).submit()
    return PLAYER


@pytest.mark.spec("DEC-32")
@pytest.mark.parametrize(
    "case",
    [
        _spot_to_itself("own.Room", "room"),
        _spot_to_itself("own.Lanes", "lanes"),
        _actor_to_itself,
        _member_to_its_spot,
        _spot_to_its_member,
    ],
    ids=[
        "spot-to-itself",
        "per-actor-spot-to-itself",
        "actor-to-itself",
        "member-to-its-spot",
        "spot-to-its-member",
    ],
)
@pytest.mark.parametrize("limit", ["mailbox_limit", "app_job_queue_size"])
async def test_a_turn_sending_to_its_own_full_queue_is_admitted_past_the_limit(
    case: Callable[[TestHost], Awaitable[str]], limit: str
) -> None:
    """Five sends from one turn to a queue of two (or with two job permits on its host) that
    only the turn's end empties: the turn goes on, and every message is handled once, in order,
    after it."""
    async with open_test_host(app, **{limit: 2}) as host:
        unit = await case(host)
        await until_logged(f"{unit}:{COUNT}")
        notes = [entry for entry in log if entry.startswith(f"{unit}:")]
        assert [f"{unit}:{n}" for n in range(1, COUNT + 1)] == notes
        assert log.index("sent") < log.index(f"{unit}:1")
        await trio.testing.wait_all_tasks_blocked()
        node: Any = host.host._node  # every permit, taken past the size or not, came back once
        assert node.config.app_job_queue_size == node.jobs.available


@pytest.mark.spec("DEC-32", "CMP-5.1")
async def test_a_turn_sending_to_another_full_queue_still_waits_for_room() -> None:
    """Spot b's turn is held and its queue full; a turn of Spot a sending to b waits for room
    (a's turn does not go on), and once b's turn ends every message is handled in order."""
    async with open_test_host(app, mailbox_limit=2) as host:
        for spot in ("a", "b"):
            await host.spots.get_or_create(spot, "own.Room").submit()
        await host.route.send_to_spot("b", Block()).submit()
        await trio.testing.wait_all_tasks_blocked()
        for n in (-1, 0):  # b's queue is full behind its held turn
            await host.route.send_to_spot("b", Note(n)).submit()
        await host.route.send_to_spot("a", Burst("b")).submit()
        await trio.testing.wait_all_tasks_blocked()
        assert "sent" not in log
        assert not [entry for entry in log if entry.startswith("b:")]
        Gate.release.set()
        await until_logged(f"b:{COUNT}")
        notes = [entry for entry in log if entry.startswith("b:")]
        assert [f"b:{n}" for n in range(-1, COUNT + 1)] == notes
        assert "sent" in log
