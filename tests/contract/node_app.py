"""A tiny application for ``zlink-trio node`` tests (tests/contract/test_node_cli.py): the node
configuration names it as ``node_app:app``."""

from __future__ import annotations

import attrs

import zlink_trio as zl

app = zl.Application()


@app.message("node_app.Hello")
@attrs.frozen
class Hello:
    name: str


@app.user_spot("node_app.Greeter")
class Greeter(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def __init__(self) -> None:
        self.greeted: list[str] = []

    @zl.packet_handler(Hello)
    async def hello(self, msg: Hello) -> None:
        self.greeted.append(msg.name)


not_an_app = "a string, not a zl.Application"


@attrs.frozen
class Undeclared:
    """A message ``bad_app`` handles without declaring it."""


bad_app = zl.Application()
"""Valid as a configuration, refused when the host starts: its Spot handles a message that is
not declared (REG-5.5)."""


@bad_app.user_spot("node_app.Broken")
class Broken(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.packet_handler(Undeclared)
    async def undeclared(self, msg: Undeclared) -> None: ...
