"""The application of the relocation e2e tests (tests/e2e/test_relocation.py).

Two Spot types that move with their state: ``reloc.Room`` (User Spot) and ``reloc.Counter``
(Instance Spot). Their state is, per sender, the last sequence number handled
(``last``); ``LastSeen`` carries it across a move as JSON. Every turn of ``Note`` (one-way) and
``Ask`` (request, answered with ``Answer``: the host and activation that ran it) is written to
``sink`` as one turn record of tests/e2e/history_check.py: id, object generation, host,
activation (a new one for every instance, so a restored Spot is a new activation), sender, seq,
the ``prev`` the state held, and the turn's start and end on the machine-wide monotonic clock.
The handlers never await: a turn is one step of its task.

``gates`` forces the moment a failure test names: an armed point (``capture`` or ``restore`` of
the adapter, or ``closing``, the source's ``on_closing`` after a move's commit) writes
``<folder>/<host>.<point>.reached`` the first time it is reached, and every Spot that reaches it
waits there until ``<folder>/<host>.<point>.release`` exists (or forever, until the process is
killed): a host moves several Spots at once, and none may pass the point before the test says.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

import zlink_trio as zl

app = zl.Application()

ROOM = "reloc.Room"
COUNTER = "reloc.Counter"
GATE_POLL = 0.01
"""How often an armed gate looks for its release file (the test's side of the gate)."""


@app.message("reloc.Note")
@attrs.frozen
class Note:
    sender: str
    seq: int


@app.message("reloc.Ask")
@attrs.frozen
class Ask:
    sender: str
    seq: int


@app.message("reloc.Answer")
@attrs.frozen
class Answer:
    host: str
    act: str


@app.message("reloc.Touch")
@attrs.frozen
class Touch:
    """Activates an Instance Spot where it is sent from; handled without a record."""


@app.message("reloc.Where")
@attrs.frozen
class Where:
    """Asks where a Spot runs; handled without a record."""


Sink = Callable[[dict[str, Any]], None]
sink: Sink = lambda _entry: None  # noqa: E731
"""Where each turn record goes: a file in a host's process (``file_sink``)."""


def file_sink(path: Path) -> Sink:
    """A sink appending one JSON line per record to ``path``, flushed each time, so a killed
    process leaves every line it wrote."""
    stream = open(path, "a", encoding="utf-8")  # noqa: SIM115  # open for the process's life

    def write(entry: dict[str, Any]) -> None:
        stream.write(json.dumps(entry) + "\n")
        stream.flush()

    return write


class Gates:
    """The armed points of this process (see the module docstring)."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.host = ""
        self.armed: set[str] = set()

    async def reach(self, point: str, spot_id: str) -> None:
        if point not in self.armed:
            return
        assert self.folder is not None
        reached = self.folder / f"{self.host}.{point}.reached"
        if not reached.exists():
            reached.write_text(spot_id)
        release = self.folder / f"{self.host}.{point}.release"
        while not release.exists():  # noqa: ASYNC110  # the test's file is the only signal
            await trio.sleep(GATE_POLL)


gates = Gates()


class LastSeen(zl.SpotRelocationAdapter["Tracked"]):
    """Carries ``Tracked.last`` across a move."""

    async def capture(self, target: Tracked) -> bytes:
        await gates.reach("capture", target.context.spot_id.value)
        return json.dumps(target.last).encode()

    async def restore(self, target: Tracked, payload: bytes) -> None:
        await gates.reach("restore", target.context.spot_id.value)
        target.last = json.loads(payload)


class Tracked:
    """Records every turn and keeps the last seq of each sender (a mixin of both Spot types)."""

    context: Any

    def __init__(self) -> None:
        self.act = uuid.uuid4().hex[:12]
        self.last: dict[str, int] = {}

    def _turn(self, kind: str, sender: str, seq: int) -> None:
        start = time.monotonic()
        prev = self.last.get(sender, 0)
        self.last[sender] = seq
        ref = self.context.ref
        end = time.monotonic()
        sink(
            {
                "id": ref.spot_id.value,
                "gen": ref.object_generation.value,
                "host": ref.node_rid.value,
                "act": self.act,
                "sender": sender,
                "seq": seq,
                "kind": kind,
                "prev": prev,
                "start": start,
                "end": end,
            }
        )

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        self._turn("send", msg.sender, msg.seq)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        self._turn("request", req.sender, req.seq)
        return Answer(self.context.ref.node_rid.value, self.act)

    @zl.packet_handler(Touch)
    async def touch(self, msg: Touch) -> None:
        pass

    @zl.request_handler(Where)
    async def where(self, req: Where) -> Answer:
        return Answer(self.context.ref.node_rid.value, self.act)

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        if closing.reason is zl.SpotCloseReason.RELOCATION_OUT:
            await gates.reach("closing", self.context.spot_id.value)


@app.user_spot(ROOM, relocation=zl.preserve_state_with(LastSeen))
class Room(Tracked, zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor


@app.instance_spot(COUNTER, relocation=zl.preserve_state_with(LastSeen))
class Counter(Tracked, zl.InstanceSpot):
    pass
