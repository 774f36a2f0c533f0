"""Following a Spot or Actor that moved away (routing/messaging.py Rule 10; specs/relocation.md
RELOC-49).

After a Spot's move (host/moving.py) the source remembers where it went for
``HostConfig.relocation_follow_window`` seconds. Work from a peer that has not learned the move
yet (its routing cache still names this host) is relayed there instead of being refused as a
stale route or, for a one-way message, dropped; a Spot live here again (it moved back) is
served here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.forward import starts_once
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._wire import Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId, StableTypeName

__all__ = ["Moved", "relay_followed"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


class Moved:
    """The Spots and Actors that moved away from this host, each to its new owner until a
    deadline."""

    def __init__(
        self, spots: SpotCatalog[Activation], actors: ActorCatalog[ActorActivation]
    ) -> None:
        self._spots = spots
        self._actors = actors
        self._window = spots.node.config.relocation_follow_window
        self._moved: dict[SpotId | ActorId, tuple[NodeRid, float]] = {}
        self._last_relay = -math.inf
        """When work for a moved unit last reached this host (Trio's clock)."""
        self._relaying: dict[SpotId | ActorId, trio.Event] = {}
        """Units whose move told the target to open and still relays what reached them here
        (``relaying_after_open`` until ``relayed``)."""
        self._in_flight = 0
        """Relayed requests whose answer has not come back yet (``answer_awaited``)."""
        self.moving = 0
        """Moves of units away from this host under way (``under_way``; host/moving.py: a move
        alone commits quietly and publishes once its unit serves, RELOC-76)."""
        self.relays = 0
        """Work for units that moved away and closed here that ``followed`` sent on to their
        new owner: a peer's sends and requests and this host's own calls (RELOC-79)."""
        self._answered = trio.Event()

    @contextmanager
    def under_way(self) -> Iterator[None]:
        """Count one move of a unit away from this host while it lasts (``moving``)."""
        self.moving += 1
        try:
            yield
        finally:
            self.moving -= 1

    def follow(self, unit: SpotId | ActorId, owner: NodeRid) -> None:
        """``unit`` moved to ``owner``: follow it from now on, for the window."""
        now = trio.current_time()
        self._moved[unit] = (owner, now + self._window)
        self._last_relay = now  # the quiet wait counts from the last move at the earliest

    def relaying_after_open(self, unit: SpotId | ActorId) -> None:
        """The move of ``unit`` relayed what waited here and tells the target to open: what
        reaches it here from now on is relayed after that, until ``relayed(unit)``."""
        self._relaying.setdefault(unit, trio.Event())

    def relayed(self, unit: SpotId | ActorId) -> None:
        """The move of ``unit`` has relayed everything that waited here for it."""
        done = self._relaying.pop(unit, None)
        if done is not None:
            done.set()

    async def wait_relayed(self, unit: SpotId | ActorId) -> None:
        """Return once no move of ``unit`` relays, after its target opened, what reached it
        here (routing/reroute.py); at once before the opening: all that is relayed ahead of
        it."""
        done = self._relaying.get(unit)
        if done is not None:
            await done.wait()

    def followed(
        self, unit: SpotId | ActorId, remote: Remote | None, *, count: bool = True
    ) -> tuple[Remote, Owner] | None:
        """Where work for ``unit`` goes instead of here, or ``None``; with ``count`` it is a
        call of this host's, counted in ``relays`` (a peer's is counted by ``relay_followed``,
        a sender's flush is no call)."""
        if not self._moved:
            return None
        moved = self._moved.get(unit)
        if moved is None or remote is None:
            return None
        here = self._spots.activations if type(unit) is SpotId else self._actors.actors
        if unit in here:
            return None
        owner, until = moved
        now = trio.current_time()
        if now >= until:
            del self._moved[unit]
            return None
        self._last_relay = now
        if count:
            self.relays += 1
        return remote, Owner(owner)

    @contextmanager
    def answer_awaited(self) -> Iterator[None]:
        """Around a relay under way (a relayed request's wait for the new owner's answer, a
        relayed send's wait for the transport to take it): the quiet wait waits for it too, so
        a shutdown does not end it with ``SHUTTING_DOWN`` (RELOC-69)."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._answered.set()
                self._answered = trio.Event()

    async def request(
        self,
        followed: tuple[Remote, Owner],
        target: SpotId | ActorId,
        message: object,
        reply_type: type,
        metadata: Mapping[str, str],
        instance: StableTypeName | None,
        deadline: float,
    ) -> object:
        """Relay a request of this host's for a moved unit (``followed(target)``) as this
        host's own request to its new owner, its answer awaited (``answer_awaited``)."""
        relay, owner = followed
        with self.answer_awaited():
            return await relay.request(
                owner, target, message, reply_type, metadata, instance, deadline
            )

    async def wait_quiet(self, quiet: float) -> None:
        """Return once no work for a moved unit has reached this host for ``quiet`` seconds and
        every relayed request has its answer, or once nothing is followed any more and no
        relayed request waits (RELOC-69): the senders' routes have caught up."""
        while self._moved or self._in_flight:
            if self._in_flight:
                await self._answered.wait()
                continue
            left = self._last_relay + quiet - trio.current_time()
            if left <= 0:
                return
            await trio.sleep(left)
            self._expire()

    def _expire(self) -> None:
        now = trio.current_time()
        for unit in [u for u, (_owner, until) in self._moved.items() if now >= until]:
            del self._moved[unit]


async def relay_followed(
    node: LocalNode,
    moved: Moved,
    followed: tuple[Remote, Owner],
    message: Send | Request,
    reply: Callable[[Request, object], None],
    nursery: trio.Nursery | None,
) -> None:
    """Relay a peer's ``message`` for a unit that moved away to its new owner, from the
    transport's reader, so that one sender's messages get there in the order they came
    (RELOC-68): a send once the transport has it, a request once it is on its way, its answer
    (or error) given to ``reply`` from a task in ``nursery``. Each goes as it came (RELOC-29):
    the same operation id, message bytes, metadata and instance type, a request's budget what
    is left of its deadline; its Reply goes back as it came too, to the caller's reply route."""
    relay, owner = followed
    moved.relays += 1
    if type(message) is Send:
        try:
            # A send waiting for the new owner's credit is under way too: a shutdown's quiet
            # wait must not leave it behind (its sender has it acknowledged).
            with moved.answer_awaited():
                await relay.send_as_is(owner, message)
        except ZLinkError as error:
            _log.warning("a send to %s was not relayed: %s", message.target, error)
        return
    request = message
    assert type(request) is Request
    if nursery is None:
        reply(request, ZLinkError(ErrorKind.SHUTTING_DOWN, "not serving peers any more"))
        return
    deadline = node.clock.now() + max(request.budget_us / 1_000_000, 1e-6)

    async def relayed(*, task_status: trio.TaskStatus[None]) -> None:
        on_submitted = starts_once(task_status)

        try:
            with moved.answer_awaited():
                result: object = await relay.request_as_is(owner, request, deadline, on_submitted)
        except ZLinkError as error:
            result = error
        finally:
            on_submitted()
        reply(request, result)

    await nursery.start(relayed)  # the next message goes once this one is on its way
