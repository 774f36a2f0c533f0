"""A request whose deadline passed in the queue is not handled (specs/completion.md CMP-9.11)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
handled: list[int] = []


class Gate:
    entered = trio.Event()
    release = trio.Event()


@app.message("expired.Ask")
@attrs.frozen
class Ask:
    n: int


@app.message("expired.Hold")
@attrs.frozen
class Hold:
    pass


@app.message("expired.Answer")
@attrs.frozen
class Answer:
    n: int
    deadline: float | None


async def held() -> Answer:
    """A turn that holds its Spot or Actor until the test releases it."""
    Gate.entered.set()
    await Gate.release.wait()
    return Answer(0, None)


@app.user_spot("expired.Room")
class Room(NoMembers):
    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, _req: Hold) -> Answer:
        return await held()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        handled.append(req.n)
        return Answer(req.n, ctx.deadline)


@app.message("expired.Boom")
@attrs.frozen
class Boom:
    pass


@app.actor("expired.Player")
class Player(zl.Actor):
    @zl.request_handler(Boom, reply=Answer)
    async def boom(self, _req: Boom) -> Answer:
        raise ValueError("no such move")

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, _req: Hold) -> Answer:
        return await held()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        handled.append(req.n)
        return Answer(req.n, None)


@asynccontextmanager
async def hosts(store_dsn: str, count: int) -> AsyncIterator[list[zl.Host]]:
    config = zl.HostConfig(mesh=f"exp-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as first:
        if count == 1:
            yield [first]
            return
        async with zl.open_host(app, config) as second:
            yield [first, second]


Asker = Callable[[zl.Host, object], Awaitable[Answer]]


BUDGET = 0.3
"""The expiring request's timeout (seconds)."""


def queued(owner: zl.Host) -> bool:
    """Whether a message waits in a queue of ``owner``'s Spots or Actors (behind the held
    turn). Reads the host's internals: no public view of queue lengths yet."""
    messaging = owner._messaging  # the test looks inside the owner
    live = [*messaging.spots.activations.values(), *messaging.actors.actors.values()]
    return any(len(item.mailbox) > 0 for item in live)


async def queued_past_its_deadline(owner: zl.Host, caller: zl.Host, ask: Asker) -> Answer:
    """Hold the target with a turn (from ``owner``), let a request from ``caller`` time out
    behind it, release the turn and return the answer to a later request: the queue being
    FIFO, that answer also shows the expired request's turn has come and gone."""
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, owner, Hold())
            await Gate.entered.wait()
            with pytest.raises(zl.ZLinkError) as ended:
                await ask(caller, (Ask(1), BUDGET))
            assert zl.ErrorKind.DEADLINE_EXCEEDED == ended.value.kind
            # A remote owner fixes the deadline when the request arrives (ROUTE-6), later than
            # the caller's: once the request is queued there, its deadline is at most BUDGET
            # away, so the turn is held until then.
            while not queued(owner):  # noqa: ASYNC110  # a queue length, not an event
                await trio.sleep(0.01)
            await trio.sleep(BUDGET)
            Gate.release.set()
        return await ask(caller, Ask(2))


def asking(target: str, *, actor: bool) -> Asker:
    """A request to the Spot or Actor ``target``; ``(message, timeout)`` sets a timeout."""

    async def ask(host: zl.Host, what: object) -> Answer:
        message, timeout = what if isinstance(what, tuple) else (what, 30.0)
        route = host.route
        if actor:
            call = route.request_to_actor(target, message, reply_type=Answer)
        else:
            call = route.request_to_spot(target, message, reply_type=Answer)
        return await call.timeout(timeout).submit()

    return ask


@pytest.mark.spec("CMP-9.11")
@pytest.mark.parametrize("where", ["local", "remote", "actor"])
async def test_a_request_that_expired_in_the_queue_is_not_handled(
    store_dsn: str, where: str
) -> None:
    """A request queued behind a turn that holds its Spot (on its own host or another) or its
    Actor past the request's deadline ends DEADLINE_EXCEEDED for its caller, and its handler
    never runs; a later request is handled."""
    handled.clear()
    Gate.entered, Gate.release = trio.Event(), trio.Event()
    target = f"target-{uuid.uuid4().hex[:8]}"
    async with hosts(store_dsn, 2 if where == "remote" else 1) as running:
        owner, caller = running[0], running[-1]
        if where == "actor":
            await owner.actors.create(target, "expired.Player").submit()
        else:
            await owner.spots.get_or_create(target, "expired.Room").submit()
        answer = await queued_past_its_deadline(
            owner, caller, asking(target, actor=where == "actor")
        )
        assert 2 == answer.n
        assert [2] == handled


@pytest.mark.spec("ERR-5.9")
async def test_a_raising_actor_request_handler_names_handler_actor_class_and_text(
    store_dsn: str,
) -> None:
    """The caller of an Actor whose request handler raises learns which handler of which Actor
    raised what."""
    player = f"player-{uuid.uuid4().hex[:8]}"
    async with hosts(store_dsn, 1) as (host,):
        await host.actors.create(player, "expired.Player").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_actor(player, Boom(), reply_type=Answer).submit()
        assert zl.ErrorKind.INTERNAL_FAILURE == caught.value.kind
        expected = f"request handler boom of Actor {player} raised ValueError: no such move"
        assert expected == caught.value.message
