"""Model-check the scoreboard with hypothesis and zlink_trio.testing (see the README section
"Model-check your app").

    pytest examples/model_check          # on the shared embedded store, or ZLINK_STORE_DSN
    tox -c examples/model_check          # the same across Python 3.11, 3.12 and 3.13

Every example runs on a fresh host in a mesh of its own. The rules create games, score, read,
close, create again and restart the host (a shutdown, then a new run); the model says what every
live game must hold; the invariants say every call ended exactly once, generations only grow,
and nothing ran on a closed incarnation.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from scoreboard import Board, GetScore, Score, app, handled

import zlink_trio as zl
from zlink_trio.testing import HostStateMachine

T = TypeVar("T")
GAMES = ("chess", "go")
PLAYERS = ("ada", "bob")


class ScoreboardModel(HostStateMachine):
    app = app  # the application every example's host runs

    def __init__(self) -> None:
        super().__init__()
        handled.clear()
        self.points: dict[str, dict[str, int]] = {}
        """The model: the score of every live game."""
        self.generation: dict[str, int] = {}
        """The last object generation seen for each game id."""
        self.refs: dict[str, zl.SpotRef] = {}
        self.closed: dict[tuple[str, int], int] = {}
        """Closed incarnations, with how many turns they had run: no more may run."""
        self.calls = 0
        self.outcomes = 0

    def _call(self, submit: Callable[[], Awaitable[T]]) -> T:
        """Run one call; count it and its end (every call ends exactly once)."""
        self.calls += 1
        try:
            result: T = self.run(submit)
            return result
        finally:
            self.outcomes += 1

    @rule(game=st.sampled_from(GAMES))
    def open_game(self, game: str) -> None:
        result = self._call(self.host.spots.get_or_create(game, "games.Scoreboard").submit)
        generation = result.spot_ref.object_generation.value
        if game in self.points:
            assert zl.SpotCreateStatus.EXISTING == result.status
            assert self.generation[game] == generation
        else:
            assert zl.SpotCreateStatus.CREATED == result.status
            assert generation > self.generation.get(game, 0)  # generations only grow
            self.points[game] = {}
        self.generation[game] = generation
        self.refs[game] = result.spot_ref

    @precondition(lambda self: bool(self.points))
    @rule(data=st.data(), player=st.sampled_from(PLAYERS), points=st.integers(1, 5))
    def score(self, data: st.DataObject, player: str, points: int) -> None:
        game = data.draw(st.sampled_from(sorted(self.points)))
        self._call(self.host.route.send_to_spot(game, Score(player, points)).submit)
        board = self.points[game]
        board[player] = board.get(player, 0) + points

    @precondition(lambda self: bool(self.points))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        game = data.draw(st.sampled_from(sorted(self.points)))
        call = self.host.route.request_to_spot(game, GetScore(), reply_type=Board)
        assert Board(self.points[game]) == self._call(call.submit)

    @precondition(lambda self: bool(self.points))
    @rule(data=st.data())
    def close_game(self, data: st.DataObject) -> None:
        game = data.draw(st.sampled_from(sorted(self.points)))
        ref = self.refs.pop(game)
        assert self._call(lambda: self.host.spots.close(ref)) is True
        incarnation = (game, self.generation[game])
        self.closed[incarnation] = self._turns_of(incarnation)
        del self.points[game]

    @rule()
    def restart(self) -> None:
        """The host shuts down (every game closes with it) and a new run takes its place."""
        self.restart_host(0)
        for game in self.points:
            self.refs.pop(game)
            incarnation = (game, self.generation[game])
            self.closed[incarnation] = self._turns_of(incarnation)
        self.points.clear()

    @rule()
    def quiet(self) -> None:
        self.wait_quiet()  # every send handled, nothing in flight

    @invariant()
    def every_call_ended_once(self) -> None:
        assert self.calls == self.outcomes

    @invariant()
    def nothing_ran_on_a_closed_game(self) -> None:
        for incarnation, turns in self.closed.items():
            assert turns == self._turns_of(incarnation)

    def _turns_of(self, incarnation: tuple[str, int]) -> int:
        return sum((game, generation) == incarnation for game, generation, _ in handled)


ScoreboardModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("EXAMPLES", "50")),
    stateful_step_count=25,
    deadline=None,
)
test_scoreboard = ScoreboardModel.TestCase
