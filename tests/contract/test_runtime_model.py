"""A hypothesis stateful model of one host: creates, sends, requests, timeouts, caller
cancellation, Actors joining and leaving, close and shutdown in random order (specs/completion.md,
specs/spots.md, specs/actors.md, specs/shutdown.md, specs/identifiers.md).

The model is a ``zlink_trio.testing.HostStateMachine`` (specs/testing.md KIT-6, KIT-11): the
kit's Trio loop runs in a helper thread (DESIGN §3: hypothesis-trio does not work with current
hypothesis) and every rule calls ``self.run(afn, *args)``; requests that wait across steps are
the example's background tasks (``self.start_soon``). Each example gets its own host in a fresh
mesh on the session's store; the model's ``teardown`` shuts it down itself and checks how every
call ended, so every example ends with a real shutdown.

Reproducing a failure: the seed is printed (shown by pytest on failure); run
``ZLINK_MODEL_SEED=<seed> pytest tests/contract/test_runtime_model.py``. The hypothesis example
database is off, so a run never depends on an earlier one. ``ZLINK_MODEL_EXAMPLES`` overrides the
number of examples and ``ZLINK_MODEL_STEPS`` the steps per example for a longer soak.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

import zlink_trio as zl
from zlink_trio.testing import HostStateMachine

EXAMPLES = int(os.environ.get("ZLINK_MODEL_EXAMPLES", "200"))
STEPS = int(os.environ.get("ZLINK_MODEL_STEPS", "10"))
WAIT = 20.0
"""Upper bound of any step (``step_timeout``); reaching it is a failure, not a pause."""
SPOT_IDS = ("a", "b", "c")
ACTOR_NAMES = ("x", "y")
MISSING = ("NOT_FOUND", "DEADLINE_EXCEEDED")
"""A request to an id no host holds: NOT_FOUND, or DEADLINE_EXCEEDED when its short budget ran
out while the store was asked for an owner (the resolve counts inside the budget, ROUTE-1)."""
LONG = 30.0
"""A request timeout no example reaches: such a request ends by reply, cancellation or shutdown."""

app = zl.Application()


@app.message("model.Note")
@attrs.frozen
class Note:
    sender: str
    seq: int


@app.message("model.Ask")
@attrs.frozen
class Ask:
    call: int


@app.message("model.Hold")
@attrs.frozen
class Hold:
    call: int


@app.message("model.Answer")
@attrs.frozen
class Answer:
    call: int


@app.message("model.Move")
@attrs.frozen
class Move:
    spot_id: str | None
    """``None``: back to the Entry Spot."""


class World:
    """What handlers observe, reset for each example; handlers record, the model asserts."""

    def __init__(self) -> None:
        self.in_turn: dict[tuple[str, int], int] = {}
        self.handled: dict[tuple[str, int], list[tuple[str, int]]] = {}
        self.holds: dict[int, trio.Event] = {}
        self.violations: list[str] = []
        self.shut_down = False
        self.generation_of: dict[str, int] = {}
        """Spot id -> generation of its live incarnation, for Actor turns to count against."""
        self.actor_handled: dict[str, list[tuple[str, int]]] = {}
        self.joins: dict[str, list[tuple[str, str]]] = {}
        """Actor id -> (outcome, error kind or "") of each join, in order."""
        self.join_done: dict[str, trio.Event] = {}


world = World()


@app.user_spot("model.Room")
class Room(zl.Spot):
    """A SPOT_WIDE User Spot whose every turn counts itself in and out of ``world.in_turn``."""

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def _key(self) -> tuple[str, int]:
        ref = self.context.ref
        return (ref.spot_id.value, ref.object_generation.value)

    def _enter(self, what: str) -> tuple[str, int]:
        key = self._key()
        if world.shut_down:
            world.violations.append(f"{what} started on {key} after shutdown returned")
        world.in_turn[key] = world.in_turn.get(key, 0) + 1
        if world.in_turn[key] > 1:
            world.violations.append(f"{what} on {key}: {world.in_turn[key]} turns at once")
        return key

    def _leave(self, key: tuple[str, int]) -> None:
        world.in_turn[key] -= 1

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        key = self._enter("on_actor_join")
        try:
            await trio.lowlevel.checkpoint()
            return zl.SpotActorJoinResult.accept()
        finally:
            self._leave(key)

    async def on_create(self, request: object | None) -> zl.SpotCreateResponse:
        world.generation_of[self.context.spot_id.value] = self._key()[1]
        key = self._enter("on_create")
        try:
            await trio.lowlevel.checkpoint()
            return zl.SpotCreateResponse.accept()
        finally:
            self._leave(key)

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        key = self._enter("on_closing")
        try:
            await trio.lowlevel.checkpoint()
        finally:
            self._leave(key)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        key = self._enter("note")
        try:
            await trio.lowlevel.checkpoint()
            world.handled.setdefault(key, []).append((msg.sender, msg.seq))
        finally:
            self._leave(key)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        key = self._enter("ask")
        try:
            await trio.lowlevel.checkpoint()
            return Answer(req.call)
        finally:
            self._leave(key)

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold) -> Answer:
        key = self._enter("hold")
        try:
            await world.holds[req.call].wait()
            return Answer(req.call)
        finally:
            self._leave(key)


@app.actor("model.Member")
class Member(zl.Actor):
    """An Actor whose turns in a SPOT_WIDE Room count against that Room's turns."""

    def _enter(self, spot_id: str) -> tuple[str, int] | None:
        generation = world.generation_of.get(spot_id)
        if generation is None:
            return None  # in the Entry Spot: its own lane
        key = (spot_id, generation)
        world.in_turn[key] = world.in_turn.get(key, 0) + 1
        if world.in_turn[key] > 1:
            world.violations.append(f"Actor turn on {key}: {world.in_turn[key]} turns at once")
        return key

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        if world.shut_down:
            world.violations.append("an Actor turn started after shutdown returned")
        key = self._enter(ctx.spot_id.value)
        try:
            await trio.lowlevel.checkpoint()
            world.actor_handled.setdefault(self.context.actor_id.value, []).append(
                (msg.sender, msg.seq)
            )
        finally:
            if key is not None:
                world.in_turn[key] -= 1

    @zl.packet_handler(Move)
    async def move(self, msg: Move) -> None:
        if msg.spot_id is None:
            self.context.join_entry_spot().defer()
        else:
            self.context.join_spot(msg.spot_id).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        name = self.context.actor_id.value
        kind = "" if completion.error is None else completion.error.kind.name
        world.joins.setdefault(name, []).append((completion.outcome.name, kind))
        world.join_done[name].set()


@attrs.define
class Call:
    """One request made by the model: what it may end with, and what it did end with."""

    number: int
    allowed: set[str]
    outcomes: list[str] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    timeout: float = 0.0
    scope: trio.CancelScope | None = None
    cancelled_by_model: bool = False


@attrs.define
class Live:
    """The model's view of one live Spot activation."""

    ref: zl.SpotRef
    sent: dict[str, list[int]] = attrs.field(factory=dict)
    """Per sender, the sequence numbers of its admitted messages in the order it sent them."""

    def check_order(self, complete: bool) -> None:
        """Each sender's messages were handled in its send order, none twice and none foreign;
        with ``complete`` every admitted message was handled."""
        key = (self.ref.spot_id.value, self.ref.object_generation.value)
        handled = world.handled.get(key, [])
        assert {sender for sender, _ in handled} <= set(self.sent), handled
        for sender, seqs in self.sent.items():
            got = [seq for who, seq in handled if who == sender]
            assert got == (seqs if complete else seqs[: len(got)]), (sender, got, seqs)

    holds: list[int] = attrs.field(factory=list)


def outcome_of(error: zl.ZLinkError) -> str:
    return error.kind.name


class HostModel(HostStateMachine):
    """One host under random creates, sends, requests, timeouts, cancels, closes and shutdown."""

    app = app
    host_config: ClassVar[Mapping[str, object]] = {"closing_timeout": 0.05}
    step_timeout = WAIT

    def __init__(self) -> None:
        global world
        world = World()
        super().__init__()
        self.calls: list[Call] = []
        self.live: dict[str, Live] = {}
        self.generations: dict[str, int] = {}
        self.closed: dict[str, zl.SpotRef] = {}
        self.sequence = 0
        self.actor_prefix = uuid.uuid4().hex[:10]
        self.actors: dict[str, str | None] = {}
        """Model actor name -> the Spot id it is a member of (``None``: the Entry Spot)."""
        self.actor_sent: dict[str, dict[str, list[int]]] = {}

    # -- plumbing ------------------------------------------------------------------------------

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    async def _settle(self, call: Call, submit: Callable[[], Awaitable[object]]) -> None:
        """Run one request to its end and record its terminal; every ending is recorded."""
        try:
            with trio.CancelScope() as scope:
                call.scope = scope
                try:
                    reply = await submit()
                except zl.ZLinkError as error:
                    call.outcomes.append(outcome_of(error))
                except trio.Cancelled:
                    call.outcomes.append("cancelled")
                    raise
                else:
                    if reply == Answer(call.number):
                        call.outcomes.append("reply")
                    else:
                        call.outcomes.append(f"wrong reply {reply!r}")
        except BaseException as error:  # an unexpected ending is an outcome the model rejects
            call.outcomes.append(f"raised {error!r}")
        finally:
            call.done.set()

    def _start(self, call: Call, submit: Callable[[], Awaitable[object]]) -> None:
        self.calls.append(call)
        self.start_soon(self._settle, call, submit)
        self.run(trio.testing.wait_all_tasks_blocked)  # the request is admitted and waiting

    def _release(self, holds: list[int]) -> None:
        numbers = list(holds)

        async def release() -> None:
            for number in numbers:
                world.holds[number].set()

        self.run(release)
        holds.clear()

    # -- rules ---------------------------------------------------------------------------------

    @initialize()
    def first_spot(self) -> None:
        """Every example starts with one live Spot, so most calls reach a handler."""
        self.get_or_create(SPOT_IDS[0])

    @rule(spot_id=st.sampled_from(SPOT_IDS))
    def get_or_create(self, spot_id: str) -> None:
        result = self.run(self.host.spots.get_or_create(spot_id, "model.Room").submit)
        if spot_id in self.live:
            assert zl.SpotCreateStatus.EXISTING == result.status
            assert self.live[spot_id].ref == result.spot_ref
            return
        assert zl.SpotCreateStatus.CREATED == result.status
        generation = result.spot_ref.object_generation.value
        assert generation > self.generations.get(spot_id, 0)
        self.generations[spot_id] = generation
        self.live[spot_id] = Live(result.spot_ref)

    @rule()
    def create(self) -> None:
        result = self.run(self.host.spots.create("model.Room").submit)
        assert zl.SpotCreateStatus.CREATED == result.status
        spot_id = result.spot_ref.spot_id.value
        assert spot_id not in self.generations
        self.generations[spot_id] = result.spot_ref.object_generation.value
        self.live[spot_id] = Live(result.spot_ref)

    def _known(self) -> list[str]:
        """Every id the model knows, in a fixed order: create() ids are random UUIDs, so they
        are ordered by when they were made, never sorted (hypothesis replays its draws)."""
        return list(SPOT_IDS) + [s for s in self.generations if s not in SPOT_IDS]

    def _live_ids(self) -> list[str]:
        return [s for s in self._known() if s in self.live]

    def _target(self, data: st.DataObject) -> str:
        """Mostly a live Spot; sometimes any id the model knows, live or not."""
        known = self._known()
        if self.live and data.draw(st.integers(0, 4)):
            return data.draw(st.sampled_from(self._live_ids()))
        return data.draw(st.sampled_from(known))

    @rule(data=st.data(), sender=st.sampled_from(("s1", "s2")), count=st.integers(1, 3))
    def send(self, data: st.DataObject, sender: str, count: int) -> None:
        spot_id = self._target(data)
        for _ in range(count):
            seq = self._next()
            call = self.host.route.send_to_spot(spot_id, Note(sender, seq))
            if spot_id not in self.live:
                with pytest.raises(zl.ZLinkError) as caught:
                    self.run(call.submit)
                assert zl.ErrorKind.NOT_FOUND == caught.value.kind
                continue
            assert self.run(call.submit) is None  # complete at admission (CMP-4.4)
            self.live[spot_id].sent.setdefault(sender, []).append(seq)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), count=st.integers(1, 4))
    def send_concurrently(self, data: st.DataObject, count: int) -> None:
        """Two senders, each its own task, send to one live Spot at the same time, each
        awaiting its own submits: each sender's messages keep their order."""
        spot_id = data.draw(st.sampled_from(self._live_ids()))
        plan = {f"c{k}-{self._next()}": [self._next() for _ in range(count)] for k in (1, 2)}

        async def sender(name: str, seqs: list[int]) -> None:
            for seq in seqs:
                assert await self.host.route.send_to_spot(spot_id, Note(name, seq)).submit() is None

        async def both() -> None:
            async with trio.open_nursery() as nursery:
                for name, seqs in plan.items():
                    nursery.start_soon(sender, name, seqs)

        self.run(both)
        self.live[spot_id].sent.update(plan)

    @rule(data=st.data())
    def request(self, data: st.DataObject) -> None:
        """An immediate request: a reply when nothing holds the Spot's gate, else it may time
        out behind the held turn."""
        spot_id = self._target(data)
        number = self._next()
        live = self.live.get(spot_id)
        if live is None:
            allowed = set(MISSING)
        elif live.holds:
            allowed = {"reply", "DEADLINE_EXCEEDED", "SHUTTING_DOWN"}
        else:
            allowed = {"reply"}
        timeout = 10.0 if allowed == {"reply"} else 0.05
        submit = (
            self.host.route.request_to_spot(spot_id, Ask(number), reply_type=Answer)
            .timeout(timeout)
            .submit
        )
        call = Call(number, allowed)
        self._start(call, submit)
        if allowed != {"reply", "DEADLINE_EXCEEDED", "SHUTTING_DOWN"}:
            self._wait(call)

    @rule(data=st.data(), timeout=st.sampled_from((0.02, 0.05, LONG)), cancellable=st.booleans())
    def request_held(self, data: st.DataObject, timeout: float, cancellable: bool) -> None:
        """A request whose handler waits for the model's release: it ends with the reply, its
        timeout, the caller's cancellation or shutdown, whichever settles first."""
        spot_id = self._target(data)
        number = self._next()
        self.run(self._hold_event, number)
        live = self.live.get(spot_id)
        submit = (
            self.host.route.request_to_spot(spot_id, Hold(number), reply_type=Answer)
            .timeout(timeout)
            .submit
        )
        if live is None:
            # Resolving a missing id asks the store, so the call ends at a time the model does
            # not control: wait for its end here, and never offer it to the cancel rule.
            call = Call(number, set(MISSING), timeout=timeout)
            self._start(call, submit)
            self._wait(call)
            return
        allowed = {"reply", "DEADLINE_EXCEEDED", "SHUTTING_DOWN"}
        live.holds.append(number)
        if cancellable:
            allowed.add("cancelled")
        self._start(Call(number, allowed, timeout=timeout), submit)

    @staticmethod
    async def _hold_event(number: int) -> None:
        world.holds[number] = trio.Event()

    def _cancellable(self) -> list[Call]:
        """Calls made under a cancel scope that the model has not cancelled yet (model state
        only, so that hypothesis draws never depend on timing)."""
        return [c for c in self.calls if "cancelled" in c.allowed and not c.cancelled_by_model]

    @precondition(lambda self: bool(self._cancellable()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """The caller cancels a request: if it was still waiting it ends with trio.Cancelled,
        once; if it had already ended, nothing changes."""
        call = data.draw(st.sampled_from(self._cancellable()))
        call.cancelled_by_model = True

        async def cancel() -> list[str] | None:
            # Read in the loop's thread: the call may end between two lines of this one.
            if call.done.is_set():
                return list(call.outcomes)  # what it had ended with
            assert call.scope is not None
            call.scope.cancel()
            return None

        # A held request with the long timeout whose turn the model never released can only
        # have been waiting: its one terminal must be the cancellation.
        unreleased = any(call.number in live.holds for live in self.live.values())
        waiting = call.timeout == LONG and unreleased
        ended_with = self.run(cancel)
        if ended_with is None:
            self._wait(call)
            assert 1 == len(call.outcomes), call
            if waiting:
                assert ["cancelled"] == call.outcomes
        else:
            assert ended_with == call.outcomes
            assert not waiting

    @precondition(lambda self: any(live.holds for live in self.live.values()))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """The model lets the oldest held turn of one Spot finish."""
        spot_id = data.draw(st.sampled_from([s for s in self._live_ids() if self.live[s].holds]))
        holds = self.live[spot_id].holds
        self._release(holds[:1])
        del holds[:1]

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        """close(ref) after the model released the Spot's held turns: every message admitted
        before it was handled, in send order, and the id is free again."""
        spot_id = data.draw(st.sampled_from(self._live_ids()))
        if spot_id in self.actors.values():
            # Members keep it open: close() is False and the Spot keeps running (SPOT-37).
            assert self.run(self.host.spots.close, self.live[spot_id].ref) is False
            return
        live = self.live.pop(spot_id)
        self._release(live.holds)
        assert self.run(self.host.spots.close, live.ref) is True
        world.generation_of.pop(spot_id, None)
        self.closed[spot_id] = live.ref
        live.check_order(complete=True)

    @precondition(lambda self: bool(set(self.generations) - set(self.live)))
    @rule(data=st.data())
    def close_again(self, data: st.DataObject) -> None:
        """close() of a Spot that is already closed is False."""
        spot_id = data.draw(
            st.sampled_from(
                [s for s in self._known() if s in self.generations and s not in self.live]
            )
        )
        ref = zl.SpotRef(spot_id, self.generations[spot_id], self.host.mesh, self.host.node_rid)
        assert self.run(self.host.spots.close, ref) is False

    def _reopened(self) -> list[str]:
        return [s for s in self._live_ids() if s in self.closed]

    @precondition(lambda self: bool(self._reopened()))
    @rule(data=st.data())
    def close_stale(self, data: st.DataObject) -> None:
        """close() with the ref of an earlier incarnation is INVALID_OPERATION and leaves the
        live one running."""
        spot_id = data.draw(st.sampled_from(self._reopened()))
        with pytest.raises(zl.ZLinkError) as caught:
            self.run(self.host.spots.close, self.closed[spot_id])
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        self.get_or_create(spot_id)  # still there: EXISTING with the same ref

    # -- Actors ---------------------------------------------------------------------------------

    def _actor_id(self, name: str) -> str:
        # Actor ids are global in the store: every example uses ids of its own.
        return f"{self.actor_prefix}-{name}"

    @rule(name=st.sampled_from(ACTOR_NAMES))
    def get_or_create_actor(self, name: str) -> None:
        call = self.host.actors.get_or_create(self._actor_id(name), "model.Member")
        result = self.run(call.submit)
        expected = (
            zl.ActorCreateStatus.EXISTING if name in self.actors else (zl.ActorCreateStatus.CREATED)
        )
        assert expected == result.status
        self.actors.setdefault(name, None)

    @precondition(lambda self: bool(self.actors))
    @rule(data=st.data(), sender=st.sampled_from(("s1", "s2")), count=st.integers(1, 3))
    def send_to_actor(self, data: st.DataObject, sender: str, count: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.actors)))
        for _ in range(count):
            seq = self._next()
            call = self.host.route.send_to_actor(self._actor_id(name), Note(sender, seq))
            assert self.run(call.submit) is None
            self.actor_sent.setdefault(name, {}).setdefault(sender, []).append(seq)

    def _move(self, name: str, spot_id: str | None) -> tuple[str, str]:
        actor_id = self._actor_id(name)

        async def move() -> tuple[str, str]:
            done = world.join_done[actor_id] = trio.Event()
            await self.host.route.send_to_actor(actor_id, Move(spot_id)).submit()
            await done.wait()
            return world.joins[actor_id][-1]

        result: tuple[str, str] = self.run(move)
        return result

    @precondition(lambda self: bool(self.actors))
    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        """An Actor joins a Spot with no held turn: ACCEPTED if the Spot is live (a member of
        it afterwards), FAILED / NOT_FOUND if it is not."""
        name = data.draw(st.sampled_from(sorted(self.actors)))
        free = [s for s in self._known() if s not in self.live or not self.live[s].holds]
        if not free:
            return
        spot_id = data.draw(st.sampled_from(free))
        current = self.actors[name]
        if current is not None and current in self.live:
            # The Move is a turn of the Actor in its SPOT_WIDE Spot, so it waits behind that
            # Spot's held turns: release them first, as leave does.
            self._release(self.live[current].holds)
        outcome = self._move(name, spot_id)
        if spot_id in self.live:
            assert ("ACCEPTED", "") == outcome
            self.actors[name] = spot_id
        else:
            assert ("FAILED", "NOT_FOUND") == outcome

    @precondition(lambda self: any(spot is not None for spot in self.actors.values()))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A member goes back to the Entry Spot (once its Spot's held turns are released)."""
        name = data.draw(st.sampled_from(sorted(n for n, s in self.actors.items() if s)))
        spot_id = self.actors[name]
        assert spot_id is not None
        self._release(self.live[spot_id].holds)
        assert ("ACCEPTED", "") == self._move(name, None)
        self.actors[name] = None

    def _check_actor_order(self, complete: bool) -> None:
        for name, sent in self.actor_sent.items():
            handled = world.actor_handled.get(self._actor_id(name), [])
            for sender, seqs in sent.items():
                got = [seq for who, seq in handled if who == sender]
                assert got == (seqs if complete else seqs[: len(got)]), (name, sender, got)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def nothing_went_wrong_inside(self) -> None:
        assert [] == world.violations

    @invariant()
    def no_call_ends_twice(self) -> None:
        for call in self.calls:
            assert len(call.outcomes) <= 1, call

    @invariant()
    def messages_are_handled_in_send_order(self) -> None:
        for live in self.live.values():
            live.check_order(complete=False)
        self._check_actor_order(complete=False)

    def _wait(self, call: Call) -> None:
        self.run(call.done.wait)

    def teardown(self) -> None:
        """Shut the host down, then check that every call ended exactly once with an allowed
        terminal, that no turn is still running and none started after shutdown returned."""

        async def shut_down() -> None:
            await self.host.shutdown()
            world.shut_down = True
            for call in self.calls:
                await call.done.wait()
            await trio.testing.wait_all_tasks_blocked()

        try:
            # A request with the long timeout whose held turn the model never released and whose
            # caller never cancelled it is still waiting at shutdown: it must end SHUTTING_DOWN.
            held = {number for live in self.live.values() for number in live.holds}
            waiting = [
                call
                for call in self.calls
                if call.timeout == LONG and call.number in held and not call.cancelled_by_model
            ]
            self.run(shut_down)
            for call in self.calls:
                assert 1 == len(call.outcomes), call
                assert call.outcomes[0] in call.allowed, call
            for call in waiting:
                assert ["SHUTTING_DOWN"] == call.outcomes, call
            assert [] == world.violations
            assert all(0 == count for count in world.in_turn.values()), world.in_turn
            for live in self.live.values():
                live.check_order(complete=False)
            self._check_actor_order(complete=False)
        finally:
            super().teardown()


@pytest.mark.spec(
    "CMP-17.14",
    "CMP-17.18",
    "CMP-9.10",
    "SHUT-4.7",
    "SHUT-7.4",
    "ID-6.12",
    "SPOT-33",
    "SPOT-34",
    "SPOT-39",
    "SPOT-68",
    "SPOT-89",
    "SPOT-73",
    "SPOT-67",
    "ACT-20",
)
def test_random_operations_on_one_host_keep_the_completion_and_gate_invariants(
    store_dsn: str,
) -> None:
    """Random creates, sends, requests, timeouts, cancels, closes and shutdown keep the model."""
    chosen = int(os.environ.get("ZLINK_MODEL_SEED") or random.randrange(2**32))
    print(f"runtime model seed: {chosen} (rerun with ZLINK_MODEL_SEED={chosen})")
    HostModel.dsn = store_dsn
    run = get_state_machine_test(
        HostModel,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    seed(chosen)(run)()
