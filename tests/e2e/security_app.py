"""The application of the cross-process security test (tests/e2e/test_security.py): a Spot that
keeps the text of every note it handles and tells it on request."""

from __future__ import annotations

import attrs

import zlink_trio as zl

app = zl.Application()
heard: list[str] = []


@app.message("sece2e.Note")
@attrs.frozen
class Note:
    text: str


@app.message("sece2e.Ask")
@attrs.frozen
class Ask:
    pass


@app.message("sece2e.Heard")
@attrs.frozen
class Heard:
    texts: tuple[str, ...]


@app.user_spot("sece2e.Room")
class Room(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        heard.append(msg.text)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Heard:
        return Heard(tuple(heard))
