"""The application under test: a scoreboard Spot per game.

A game is a User Spot (`"games.Scoreboard"`): players score points with one-way sends, anyone
reads the score with a request, and closing the game ends it (a game created again under the
same id starts from zero, as a new incarnation). Each turn is recorded in ``handled`` with the
incarnation that ran it, so a model can check what ran where.
"""

from __future__ import annotations

import attrs

import zlink_trio as zl

app = zl.Application()

handled: list[tuple[str, int, str]] = []
"""(game id, object generation, what) for every turn that ran, in order."""


@app.message("games.Score")
@attrs.frozen
class Score:
    player: str
    points: int


@app.message("games.GetScore")
@attrs.frozen
class GetScore:
    pass


@app.message("games.Board")
@attrs.frozen
class Board:
    points: dict[str, int]


@app.user_spot("games.Scoreboard")
class Scoreboard(zl.Spot):
    def __init__(self) -> None:
        self.points: dict[str, int] = {}

    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def _note(self, what: str) -> None:
        ref = self.context.ref
        handled.append((ref.spot_id.value, ref.object_generation.value, what))

    @zl.packet_handler(Score)
    async def score(self, msg: Score) -> None:
        self._note("score")
        self.points[msg.player] = self.points.get(msg.player, 0) + msg.points

    @zl.request_handler(GetScore)
    async def get_score(self, req: GetScore) -> Board:
        self._note("get")
        return Board(dict(self.points))
