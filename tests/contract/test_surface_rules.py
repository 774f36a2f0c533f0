"""The public surface as other parts see it: request calls typed by their reply class
(specs/api.md API-12), what a host and a Spot context offer (API-17), messages as CBOR under
their stable names (API-18; specs/identifiers.md ID-6), a restarted node's calls kept apart from
its earlier run's replies (ID-7.1), and the one module that bridges asyncio and Trio
(specs/boundaries.md BND-1.4)."""

from __future__ import annotations

import typing
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import cbor2
import grimp
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio._integration.store import Found, Stores
from zlink_trio._runtime.routing.inbound import Inbound
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

# --- two applications whose Python classes differ but whose stable names are the same ---------

owner_app = zl.Application()
caller_app = zl.Application()


@owner_app.message("surface.Note")
@attrs.frozen
class OwnerNote:
    text: str


@owner_app.message("surface.Noted")
@attrs.frozen
class OwnerNoted:
    text: str


@owner_app.user_spot("surface.Room")
class OwnerRoom(NoMembers):
    @zl.request_handler(OwnerNote)
    async def note(self, msg: OwnerNote) -> OwnerNoted:
        return OwnerNoted(f"{type(self).__name__} got {type(msg).__name__} {msg.text}")


@owner_app.actor("surface.Member")
class OwnerMember(zl.Actor):
    pass


@caller_app.message("surface.Note")
@attrs.frozen
class CallerNote:
    text: str


@caller_app.message("surface.Noted")
@attrs.frozen
class CallerNoted:
    text: str


@caller_app.user_spot("surface.Room")
class CallerRoom(NoMembers):
    @zl.request_handler(CallerNote)
    async def note(self, msg: CallerNote) -> CallerNoted:
        return CallerNoted(f"{type(self).__name__} got {type(msg).__name__} {msg.text}")


@asynccontextmanager
async def _owner_and_caller(store_dsn: str) -> AsyncIterator[tuple[Stores, TestHost, TestHost]]:
    """A host of ``owner_app`` and one of ``caller_app`` in one mesh, each a peer of the other."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(owner_app, dsn=store_dsn, stores=stores) as owner,
        open_test_host(caller_app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(owner, caller)
        await meet(caller, owner)
        yield stores, owner, caller


@pytest.mark.spec("ID-6")
async def test_types_are_known_on_the_wire_and_in_the_store_by_stable_name_only(
    store_dsn: str,
) -> None:
    """Classes of other names under the same stable names reach each other across hosts, and the
    store's Spot and Actor records name the stable type, never a Python class or module."""
    async with _owner_and_caller(store_dsn) as (stores, owner, caller):
        await owner.spots.get_or_create("room-1", "surface.Room").submit()
        reply = await caller.route.request_to_spot(
            "room-1", CallerNote("hi"), reply_type=CallerNoted
        ).submit()
        assert CallerNoted("OwnerRoom got OwnerNote hi") == reply
        found = await caller.spots.get_or_create("room-1", "surface.Room").submit()
        assert zl.SpotCreateStatus.EXISTING == found.status
        actor_id = f"member-{uuid.uuid4().hex[:12]}"
        await owner.actors.create(actor_id, "surface.Member").submit()
        records = {
            "surface.Room": await stores.location.read(f"m/{owner.mesh.value}/spot/room-1"),
            "surface.Member": await stores.location.read(f"actor/{actor_id}"),
        }
    for stable_name, record in records.items():
        assert isinstance(record, Found)
        assert stable_name.encode() in record.value
        for python_name in ("OwnerRoom", "CallerRoom", "OwnerMember", "test_surface_rules"):
            assert python_name.encode() not in record.value


@pytest.mark.spec("API-18")
async def test_a_message_travels_as_cbor_under_its_stable_name(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request a peer receives names its stable type, and its payload is the CBOR map of
    the message's fields."""
    received: list[tuple[str, bytes]] = []
    on_message = Inbound.on_message

    async def spy(self: Inbound, origin: typing.Any, message: typing.Any) -> None:
        received.append((message.message_type.value, message.payload))
        await on_message(self, origin, message)

    monkeypatch.setattr(Inbound, "on_message", spy)
    async with _owner_and_caller(store_dsn) as (_, owner, caller):
        await owner.spots.get_or_create("room-2", "surface.Room").submit()
        await caller.route.request_to_spot(
            "room-2", CallerNote("asked"), reply_type=CallerNoted
        ).submit()
    application = [
        (name, cbor2.loads(payload)) for name, payload in received if name.startswith("surface.")
    ]
    assert [("surface.Note", {"text": "asked"})] == application


# --- a node that restarts while a peer still holds its earlier run's request ------------------

desk_app = zl.Application()


@desk_app.message("restart.Ask")
@attrs.frozen
class Ask:
    label: str


@desk_app.message("restart.Answer")
@attrs.frozen
class Answer:
    label: str


class Holds:
    """Requests whose label is held here until the test releases it."""

    entered: typing.ClassVar[dict[str, trio.Event]] = {}
    release: typing.ClassVar[dict[str, trio.Event]] = {}


@desk_app.user_spot("restart.Desk")
class Desk(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        if req.label in Holds.release:
            Holds.entered[req.label].set()
            await Holds.release[req.label].wait()
        return Answer(req.label)


@pytest.mark.spec("ID-7.1")
async def test_a_late_reply_to_the_previous_run_never_completes_a_call_of_the_new_one(
    store_dsn: str,
) -> None:
    """A node restarted under the same RID makes the same calls in the same order as before;
    the reply to its earlier run's held request, sent while the new run's request waits, does
    not complete the new one."""
    Holds.entered = {"old": trio.Event(), "new": trio.Event()}
    Holds.release = {"old": trio.Event(), "new": trio.Event()}
    rid = f"caller-{uuid.uuid4().hex[:8]}"
    outcomes: list[object] = []

    async def call(host: TestHost, label: str) -> None:
        ask = host.route.request_to_spot(f"desk-{label}", Ask(label), reply_type=Answer)
        try:
            outcomes.append(await ask.timeout(60).submit())
        except zl.ZLinkError as error:
            outcomes.append(error.kind)

    with trio.fail_after(60):
        async with (
            open_test_stores(store_dsn) as stores,
            open_test_host(desk_app, dsn=store_dsn, stores=stores) as server,
        ):
            for name in ("desk-ping", "desk-old", "desk-new"):
                await server.spots.get_or_create(name, "restart.Desk").submit()
            mesh = server.mesh
            async with open_test_host(
                desk_app, dsn=store_dsn, stores=stores, mesh=mesh, node_rid=rid
            ) as before:
                await meet(before, server)
                await meet(server, before)
                await call(before, "ping")  # the same calls in the same order in both runs
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, before, "old")
                    await Holds.entered["old"].wait()
                    await before.shutdown()
            async with open_test_host(
                desk_app, dsn=store_dsn, stores=stores, mesh=mesh, node_rid=rid
            ) as after:
                await meet(after, server)
                await meet(server, after)
                await call(after, "ping")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, after, "new")
                    await Holds.entered["new"].wait()
                    Holds.release["old"].set()  # its reply is sent while "new" still waits
                    await trio.testing.wait_all_tasks_blocked()
                    Holds.release["new"].set()
    expected = [Answer("ping"), zl.ErrorKind.SHUTTING_DOWN, Answer("ping"), Answer("new")]
    assert expected == outcomes


# --- request calls are generic in their reply class -------------------------------------------


@pytest.mark.spec("API-12")
def test_a_request_call_is_typed_by_its_reply_type() -> None:
    """request_to_spot and request_to_actor bind their reply_type class to the call's type
    parameter, and every terminal of the call returns that parameter."""
    for make, call_class in (
        (zl.Route.request_to_spot, zl.SpotRequestCall),
        (zl.Route.request_to_actor, zl.ActorRequestCall),
    ):
        hints = typing.get_type_hints(make)
        (bound,) = typing.get_args(hints["reply_type"])
        assert [type, call_class] == [
            typing.get_origin(hints["reply_type"]),
            typing.get_origin(hints["return"]),
        ]
        assert (bound,) == typing.get_args(hints["return"])
        (parameter,) = call_class.__parameters__
        assert isinstance(parameter, typing.TypeVar)
        returns = {
            terminal: typing.get_type_hints(getattr(call_class, terminal))["return"]
            for terminal in ("submit", "yield_", "submit_sync")
        }
        assert {"submit": parameter, "yield_": parameter, "submit_sync": parameter} == returns


# --- what a host and a Spot's context offer ---------------------------------------------------

probe_app = zl.Application()


@probe_app.message("probe.Inspect")
@attrs.frozen
class Inspect:
    pass


@probe_app.message("probe.Facts")
@attrs.frozen
class Facts:
    lines: list[str]


@probe_app.message("probe.TryClose")
@attrs.frozen
class TryClose:
    pass


def _facts_of(context: zl.SpotContext) -> Facts:
    return Facts(
        [
            type(context.route).__name__,
            type(context.spots).__name__,
            type(context.workers).__name__,
            type(context.timers).__name__,
            context.spot_id.value,
            context.ref.spot_id.value,
        ]
    )


async def _close_outcome(context: zl.SpotContext) -> Facts:
    try:
        await context.close()
    except zl.ZLinkError as error:
        return Facts([error.kind.name])
    return Facts(["closed"])


@probe_app.instance_spot("probe.Gauge")
class Gauge(zl.InstanceSpot):
    @zl.request_handler(Inspect)
    async def inspect(self, req: Inspect) -> Facts:
        return _facts_of(self.context)

    @zl.request_handler(TryClose)
    async def try_close(self, req: TryClose) -> Facts:
        return await _close_outcome(self.context)


@probe_app.user_spot("probe.Board")
class Board(NoMembers):
    @zl.request_handler(Inspect)
    async def inspect(self, req: Inspect) -> Facts:
        return _facts_of(self.context)

    @zl.request_handler(TryClose)
    async def try_close(self, req: TryClose) -> Facts:
        return await _close_outcome(self.context)


@pytest.mark.spec("API-17")
async def test_a_host_and_a_spot_context_offer_the_same_clients(store_dsn: str) -> None:
    """A host offers route, spots and workers; a Spot's context offers them too, with spot_id,
    ref and timers, and close() closes an Instance Spot only."""
    async with open_test_host(probe_app, dsn=store_dsn) as tested:
        host = tested.host
        assert [zl.Route, zl.SpotManager, zl.Workers] == [
            type(host.route),
            type(host.spots),
            type(host.workers),
        ]
        await host.spots.get_or_create("board-1", "probe.Board").submit()
        seen = {}
        for spot_id, instance in (("gauge-1", True), ("board-1", False)):
            inspect = host.route.request_to_spot(spot_id, Inspect(), reply_type=Facts)
            seen[spot_id] = (
                await (inspect.instance_spot() if instance else inspect).submit()
            ).lines
        closing = [
            (await host.route.request_to_spot(spot_id, TryClose(), reply_type=Facts).submit()).lines
            for spot_id in ("gauge-1", "board-1")
        ]
    clients = ["Route", "SpotManager", "Workers", "SpotTimers"]
    assert {
        "gauge-1": [*clients, "gauge-1", "gauge-1"],
        "board-1": [*clients, "board-1", "board-1"],
    } == seen
    assert [["closed"], ["INVALID_OPERATION"]] == closing


# --- asyncio meets Trio in one module ---------------------------------------------------------


@pytest.mark.spec("BND-1.4")
def test_only_the_store_bridge_imports_trio_asyncio() -> None:
    """Of every module of zlink_trio, imports inside functions included, only the store's bridge
    imports trio_asyncio."""
    graph = grimp.build_graph("zlink_trio", include_external_packages=True, cache_dir=None)
    importers = graph.find_modules_that_directly_import("trio_asyncio")
    assert {"zlink_trio._integration.store.bridge"} == importers
