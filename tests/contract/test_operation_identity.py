"""Operation identity between hosts (specs/completion.md CMP-10.4): a request carries its
OperationId and its ReplyRouteId as two separate values, and no handler sees either."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.contract.peers import meet
from zlink_trio._wire import OperationId, ReplyRouteId, Request
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()
contexts: list[zl.MessageContext] = []


@app.message("opid.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("opid.Answer")
@attrs.frozen
class Answer:
    text: str


@app.instance_spot("opid.Echo")
class Echo(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        contexts.append(ctx)
        return Answer(req.text)


SPOT = "e-1"


def ask(host: TestHost, text: str) -> Any:
    """A request from ``host`` to the Echo Spot ``SPOT``, ready to submit."""
    call = host.route.request_to_spot(SPOT, Ask(text), reply_type=Answer)
    return call.instance_spot("opid.Echo")


def _requests(host: TestHost) -> list[Request]:
    """Every Request that reaches ``host`` from a peer from now on, as its transport handed it
    over (a spy on the inbound side's entry point for requests)."""
    inbound: Any = host.host._tree.inbound
    seen: list[Request] = []
    admit = inbound._admit_request

    def admit_request(origin: object, message: Request, arrived: float) -> bool:
        seen.append(message)
        return bool(admit(origin, message, arrived))

    inbound._admit_request = admit_request
    return seen


def _words(value: object) -> list[object]:
    """``value`` and, for an attrs instance or a mapping, every value inside it, recursively."""
    if attrs.has(type(value)):
        inner = [getattr(value, field.name) for field in attrs.fields(type(value))]
    elif isinstance(value, Mapping):
        inner = [part for pair in value.items() for part in pair]
    else:
        return [value]
    return [value] + [word for item in inner for word in _words(item)]


@pytest.mark.spec("CMP-10.4")
async def test_a_request_carries_its_operation_id_and_reply_route_apart_and_hidden(
    store_dsn: str,
) -> None:
    """Requests from another host reach the owner with an OperationId and a ReplyRouteId in
    their own fields, neither made of the other, and the handler's context holds neither."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as owner,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(caller, owner)
        await ask(owner, "here").submit()  # the Spot lives on the owner
        seen = _requests(owner)
        contexts.clear()
        with trio.fail_after(20):
            for text in ("one", "two", "three"):
                assert Answer(text) == await ask(caller, text).submit()

        assert 3 == len(seen)
        for request in seen:
            operation, route = request.operation_id, request.reply_route
            assert (OperationId, ReplyRouteId) == (type(operation), type(route))
            assert route.value not in (operation.high, operation.low)
        assert 3 == len({request.operation_id for request in seen})
        assert 3 == len({request.reply_route for request in seen})
        numbers = {r.operation_id.high for r in seen} | {r.operation_id.low for r in seen}
        numbers |= {r.reply_route.value for r in seen}
        assert 3 == len(contexts)
        for context in contexts:
            words = _words(context)
            assert [] == [word for word in words if type(word) in (OperationId, ReplyRouteId)]
            assert [] == [word for word in words if type(word) is int and word in numbers]
            assert [] == [word for word in words if type(word) is str and word.isdigit()]
