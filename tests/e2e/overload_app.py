"""The application of the cross-process overload tests (tests/e2e/test_overload.py,
test_high_water_mark.py): a Spot whose packet handler is stuck until released, and a quick Spot
beside it that also keeps the number of each ``Bulk`` it handled."""

from __future__ import annotations

import attrs
import trio

import zlink_trio as zl

app = zl.Application()
release = trio.Event()
noted: list[int] = []
bulked: list[int] = []


@app.message("ovle2e.Note")
@attrs.frozen
class Note:
    n: int


@app.message("ovle2e.Ask")
@attrs.frozen
class Ask:
    n: int


@app.message("ovle2e.Bulk")
@attrs.frozen
class Bulk:
    n: int
    data: bytes


@app.message("ovle2e.Answer")
@attrs.frozen
class Answer:
    n: int
    noted: list[int]


@app.user_spot("ovle2e.Slow")
class Slow(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        await release.wait()
        noted.append(msg.n)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n, list(noted))


@app.user_spot("ovle2e.Quick")
class Quick(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n, list(bulked))

    @zl.packet_handler(Bulk)
    async def bulk(self, msg: Bulk) -> None:
        bulked.append(msg.n)
