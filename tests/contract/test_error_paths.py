"""Where an error stays and what it becomes between hosts (specs/errors.md ERR-3.5, ERR-6.3) and
the names of the terminals (specs/decisions.md DEC-19): an argument error is raised where the
call was made and nothing travels; a peer's failure comes back as a ``ZLinkError`` only; an
application's refusal is a reply like any other."""

from __future__ import annotations

import attrs
import pytest

import zlink_trio as zl
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("paths.Book")
@attrs.frozen
class Book:
    seats: int


@app.message("paths.Refusal")
@attrs.frozen
class Refusal:
    """The application's own answer that it will not do what was asked."""

    reason: str


@app.message("paths.Check")
@attrs.frozen
class Check:
    pass


@app.user_spot("paths.Desk")
class Desk(NoMembers):
    @zl.request_handler(Book)
    async def book(self, req: Book) -> Refusal:
        return Refusal(f"no room for {req.seats}")

    @zl.request_handler(Check)
    async def check(self, req: Check) -> Refusal:
        raise ValueError("seats must be positive")  # an argument error in the owner's process


def _sent(caller: TestHost, owner: TestHost) -> int:
    """Messages ``caller``'s transport has sent ``owner`` so far."""
    remote = caller.host._tree.remote
    assert remote is not None
    assert remote.mesh is not None
    return int(remote.mesh.traffic.sent[owner.node_rid])


@pytest.mark.spec("ERR-3.5")
async def test_an_argument_error_stays_in_the_process_that_made_it(store_dsn: str) -> None:
    """A call to a Spot on another host with a bad timeout or a bad id raises ValueError or
    TypeError at the caller and sends that host nothing; the owner's handler raising ValueError
    reaches the caller as a ZLinkError (INTERNAL_FAILURE naming it), never as a ValueError."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as owner,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(caller, owner)
        await owner.spots.get_or_create("d-1", "paths.Desk").submit()
        answer = await caller.route.request_to_spot("d-1", Book(2), reply_type=Refusal).submit()
        assert Refusal("no room for 2") == answer  # the route to the owner is up
        before = _sent(caller, owner)
        with pytest.raises(ValueError):
            caller.route.request_to_spot("d-1", Book(2), reply_type=Refusal).timeout(-1)
        with pytest.raises(TypeError):
            caller.route.send_to_spot(42, Book(2))
        assert before == _sent(caller, owner)
        with pytest.raises(zl.ZLinkError) as caught:
            await caller.route.request_to_spot("d-1", Check(), reply_type=Refusal).submit()
        assert zl.ZLinkError is type(caught.value)
        assert zl.ErrorKind.INTERNAL_FAILURE == caught.value.kind
        assert "ValueError: seats must be positive" in caught.value.message


@pytest.mark.spec("ERR-6.3")
async def test_an_application_refusal_is_the_callers_reply_local_or_remote(
    store_dsn: str,
) -> None:
    """A request handler that refuses by its business rules returns its own Refusal: the caller
    gets that reply as the request's value, on the owner's host and on another, never an error."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as owner,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(caller, owner)
        await owner.spots.get_or_create("d-2", "paths.Desk").submit()
        for host in (owner, caller):
            answer = await host.route.request_to_spot("d-2", Book(9), reply_type=Refusal).submit()
            assert Refusal("no room for 9") == answer


@pytest.mark.spec("DEC-19")
async def test_the_terminals_are_submit_and_yield_(store_dsn: str) -> None:
    """Every call object ends in ``submit()``, and one that may wait in a turn also offers
    ``yield_()``; there is no ``await`` or ``yield`` method to reach for."""
    async with open_test_host(app, dsn=store_dsn) as host:
        create = host.spots.get_or_create("d-3", "paths.Desk")
        send = host.route.send_to_spot("d-3", Book(1))
        request = host.route.request_to_spot("d-3", Book(1), reply_type=Refusal)
        for call in (create, send, request):
            assert callable(call.submit)
            assert not any(hasattr(call, name) for name in ("await_", "yield", "await"))
        assert callable(create.yield_)
        assert callable(request.yield_)
        await create.submit()
        assert Refusal("no room for 1") == await request.submit()
