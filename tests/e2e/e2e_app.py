"""The application every end-to-end host runs, and the commands a test gives a host.

The same module serves a child host (``node_child.py`` imports it as ``e2e_app``) and a host the
test process runs itself (imported as ``tests.e2e.e2e_app``): ``execute(host, command)`` runs
one command against a host and answers it as a JSON-ready dict, so a test drives a child and an
in-process host through the same words.

What runs here reports facts the test can check from outside:

- ``e2e.Room`` (User Spot) answers ``Probe`` with the node RID of the host whose process runs the
  handler (``RUNNING_ON``, set when that host starts, not read back from the runtime), the
  activation's object generation, how many messages this activation has handled (the probe
  included), whether the handler saw a deadline and how much of it was left, and how many
  ``Poke`` sends it handled with no deadline;
- ``e2e.Counter`` (Instance Spot) records the ``seq`` of every ``Step`` in the order handled;
- ``e2e.User`` (Actor) answers ``WhereAreYou`` with its host's node RID.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

import zlink_trio as zl

app = zl.Application()

ROOM = "e2e.Room"
COUNTER = "e2e.Counter"
USER = "e2e.User"

RUNNING_ON: str | None = None
"""The node RID of the host this process runs (one host per process); set by ``started``."""


def started(host: zl.Host) -> None:
    """Note which host this process runs, for the handlers' answers."""
    global RUNNING_ON
    RUNNING_ON = host.node_rid.value


def _running_on() -> str:
    assert RUNNING_ON is not None, "started(host) was not called"
    return RUNNING_ON


@app.message("e2e.Probe")
@attrs.frozen
class Probe:
    pass


@app.message("e2e.Seen")
@attrs.frozen
class Seen:
    node_rid: str
    generation: int
    handled: int
    has_deadline: bool
    remaining: float | None
    """``ctx.deadline`` minus the handler's Trio clock, in seconds (None without a deadline)."""
    pokes_without_deadline: int


@app.message("e2e.Poke")
@attrs.frozen
class Poke:
    pass


@app.message("e2e.Step")
@attrs.frozen
class Step:
    seq: int


@app.message("e2e.GetOrder")
@attrs.frozen
class GetOrder:
    pass


@app.message("e2e.Order")
@attrs.frozen
class Order:
    node_rid: str
    seqs: list[int]


@app.message("e2e.WhereAreYou")
@attrs.frozen
class WhereAreYou:
    pass


@app.message("e2e.Here")
@attrs.frozen
class Here:
    node_rid: str
    actor_id: str


@app.user_spot(ROOM)
class Room(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def __init__(self) -> None:
        self.handled = 0
        self.pokes_without_deadline = 0

    @zl.packet_handler(Poke)
    async def poke(self, msg: Poke, ctx: zl.MessageContext) -> None:
        self.handled += 1
        if ctx.deadline is None:
            self.pokes_without_deadline += 1

    @zl.request_handler(Probe)
    async def probe(self, req: Probe, ctx: zl.MessageContext) -> Seen:
        self.handled += 1
        deadline = ctx.deadline
        remaining = None if deadline is None else deadline - trio.current_time()
        return Seen(
            node_rid=_running_on(),
            generation=self.context.ref.object_generation.value,
            handled=self.handled,
            has_deadline=deadline is not None,
            remaining=remaining,
            pokes_without_deadline=self.pokes_without_deadline,
        )


@app.instance_spot(COUNTER)
class Counter(zl.InstanceSpot):
    def __init__(self) -> None:
        self.seqs: list[int] = []

    @zl.packet_handler(Step)
    async def step(self, msg: Step) -> None:
        self.seqs.append(msg.seq)

    @zl.request_handler(GetOrder)
    async def order(self, req: GetOrder) -> Order:
        return Order(_running_on(), list(self.seqs))


@app.actor(USER)
class User(zl.Actor):
    @zl.request_handler(WhereAreYou)
    async def where(self, req: WhereAreYou) -> Here:
        return Here(_running_on(), self.context.actor_id.value)


Answer = dict[str, Any]


async def _get_or_create(host: zl.Host, command: Answer) -> Answer:
    call = host.spots.get_or_create(command["id"], command.get("type", ROOM))
    if "timeout" in command:
        call = call.timeout(command["timeout"])
    result = await call.submit()
    ref = result.spot_ref
    return {
        "status": result.status.name,
        "node_rid": ref.node_rid.value,
        "generation": ref.object_generation.value,
    }


async def _request(host: zl.Host, command: Answer) -> Answer:
    seen = await (
        host.route.request_to_spot(command["id"], Probe(), reply_type=Seen)
        .timeout(command["timeout"])
        .submit()
    )
    return attrs.asdict(seen)


async def _poke(host: zl.Host, command: Answer) -> Answer:
    await host.route.send_to_spot(command["id"], Poke()).submit()
    return {}


async def _send_instance(host: zl.Host, command: Answer) -> Answer:
    await (
        host.route.send_to_spot(command["id"], Step(command["seq"])).instance_spot(COUNTER).submit()
    )
    return {}


async def _instance_order(host: zl.Host, command: Answer) -> Answer:
    order = await (
        host.route.request_to_spot(command["id"], GetOrder(), reply_type=Order)
        .instance_spot(COUNTER)
        .timeout(command["timeout"])
        .submit()
    )
    return {"node_rid": order.node_rid, "seqs": order.seqs}


async def _create_actor(host: zl.Host, command: Answer) -> Answer:
    result = await host.actors.create(command["id"], USER).submit()
    ref = result.actor_ref
    return {
        "status": result.status.name,
        "node_rid": None if ref is None else ref.node_rid.value,
    }


async def _request_actor(host: zl.Host, command: Answer) -> Answer:
    here = await (
        host.route.request_to_actor(command["id"], WhereAreYou(), reply_type=Here)
        .timeout(command["timeout"])
        .submit()
    )
    return {"node_rid": here.node_rid, "actor_id": here.actor_id}


async def _peers(host: zl.Host, command: Answer) -> Answer:
    return {"peers": sorted(rid.value for rid in host.peers)}


COMMANDS: dict[str, Callable[[zl.Host, Answer], Awaitable[Answer]]] = {
    "get_or_create": _get_or_create,
    "request": _request,
    "poke": _poke,
    "send_instance": _send_instance,
    "instance_order": _instance_order,
    "create_actor": _create_actor,
    "request_actor": _request_actor,
    "peers": _peers,
}


async def execute(host: zl.Host, command: Answer) -> Answer:
    """Run one command and answer it: ``{"ok": true, ...result}`` or, when the call raised a
    ``ZLinkError``, ``{"ok": false, "error": <ErrorKind name>}``; both carry ``elapsed``, the
    seconds the call took on this host's Trio clock. Anything else a command raises propagates:
    a broken harness fails loudly instead of answering."""
    run = COMMANDS[command["op"]]
    start = trio.current_time()
    try:
        answer = {"ok": True, **await run(host, command)}
    except zl.ZLinkError as error:
        answer = {"ok": False, "error": error.kind.name, "message": str(error)}
    answer["elapsed"] = trio.current_time() - start
    return answer
