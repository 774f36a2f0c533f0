"""User Spots on one host: create, get-or-create, lifecycle order, close (specs/spots.md)."""

from __future__ import annotations

import re
import uuid

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
events: list[tuple[str, str]] = []


@app.message("lifecycle.Create")
@attrs.frozen
class CreateRoom:
    title: str


@app.message("lifecycle.Created")
@attrs.frozen
class RoomCreated:
    title: str


@app.message("lifecycle.Note")
@attrs.frozen
class Note:
    text: str


@app.message("lifecycle.Read")
@attrs.frozen
class Read:
    pass


@app.message("lifecycle.Lines")
@attrs.frozen
class Lines:
    lines: list[str]


class Gated:
    """Holds an ``on_create`` whose request title is ``gated`` until the test releases it."""

    entered = trio.Event()
    release = trio.Event()


@app.user_spot("lifecycle.Room")
class Room(NoMembers):
    def __init__(self) -> None:
        self.lines: list[str] = []
        events.append((self.context.spot_id.value, "init"))

    async def on_create(self, request: object | None) -> zl.SpotCreateResponse:
        events.append((self.context.spot_id.value, "on_create"))
        if isinstance(request, CreateRoom):
            if request.title == "no":
                return zl.SpotCreateResponse.reject(RoomCreated("refused"))
            if request.title == "boom":
                raise RuntimeError("secret detail")
            if request.title == "slow":
                await trio.sleep_forever()
            if request.title == "gated":
                Gated.entered.set()
                await Gated.release.wait()
            return zl.SpotCreateResponse.accept(RoomCreated(request.title))
        return zl.SpotCreateResponse.accept()

    async def on_initialize(self) -> None:
        events.append((self.context.spot_id.value, "on_initialize"))

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        events.append((self.context.spot_id.value, f"on_closing:{closing.reason.name}"))
        assert closing.deadline > trio.current_time()

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        events.append((self.context.spot_id.value, f"note:{msg.text}"))
        self.lines.append(msg.text)
        if msg.text == "gated":
            Gated.entered.set()
            await Gated.release.wait()

    @zl.request_handler(Read)
    async def read(self, req: Read, ctx: zl.MessageContext) -> Lines:
        return Lines(list(self.lines))


@app.user_spot("lifecycle.Other")
class Other(NoMembers):
    pass


@app.instance_spot("lifecycle.Counter")
class Counter(zl.InstanceSpot):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Lines:
        return Lines([str(self.context.ref.object_generation.value)])


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


def of(spot_id: str) -> list[str]:
    return [what for who, what in events if who == spot_id]


@pytest.mark.spec("SPOT-4", "SPOT-12", "SPOT-3")
async def test_create_generates_a_lowercase_uuid4_id_and_returns_the_reply(store_dsn: str) -> None:
    """create() picks a lowercase canonical UUID4 id and returns CREATED with on_create's reply."""
    async with zl.open_host(app, config(store_dsn)) as host:
        result = await host.spots.create("lifecycle.Room").request(CreateRoom("t")).submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.create("lifecycle.Counter").submit()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
    spot_id = result.spot_ref.spot_id.value
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", spot_id
    )
    assert str(uuid.UUID(spot_id)) == spot_id
    assert zl.SpotCreateStatus.CREATED == result.status
    assert RoomCreated("t") == result.response
    assert zl.ObjectGeneration(1) == result.spot_ref.object_generation


@pytest.mark.spec("SPOT-5", "SPOT-9", "SPOT-40")
async def test_get_or_create_uses_the_given_id_and_finds_the_ready_spot(store_dsn: str) -> None:
    """get_or_create creates under the caller's id once; a second call returns it as EXISTING
    without running the constructor or on_create again."""
    async with zl.open_host(app, config(store_dsn)) as host:
        first = await host.spots.get_or_create("room-a", "lifecycle.Room").submit()
        second = await host.spots.get_or_create("room-a", "lifecycle.Room").submit()
        ref = first.spot_ref
        assert zl.SpotId("room-a") == ref.spot_id
        assert zl.SpotCreateStatus.CREATED == first.status
        assert zl.SpotCreateStatus.EXISTING == second.status
        assert ref == second.spot_ref
        assert second.response is None
        assert host.node_rid == ref.node_rid
    assert ["init", "on_create", "on_initialize", "on_closing:HOST_SHUTDOWN"] == of("room-a")


@pytest.mark.spec("SPOT-15")
async def test_concurrent_get_or_create_activates_exactly_once(store_dsn: str) -> None:
    """Many concurrent get_or_create calls for one id run the factory once and agree on one ref."""
    results: list[zl.SpotCreateResult] = []
    async with zl.open_host(app, config(store_dsn)) as host:

        async def one() -> None:
            results.append(await host.spots.get_or_create("room-race", "lifecycle.Room").submit())

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for _ in range(25):
                    nursery.start_soon(one)
    assert 1 == of("room-race").count("on_create")
    assert 1 == sum(r.status is zl.SpotCreateStatus.CREATED for r in results)
    assert 1 == len({r.spot_ref for r in results})


@pytest.mark.spec("SPOT-13", "ERR-6.1", "ERR-9.7")
async def test_rejected_create_is_a_typed_result_and_leaves_nothing(store_dsn: str) -> None:
    """on_create's rejection is a REJECTED value, not an error; the id stays free and unknown."""
    async with zl.open_host(app, config(store_dsn)) as host:
        rejected = (
            await host.spots.get_or_create("room-no", "lifecycle.Room")
            .request(CreateRoom("no"))
            .submit()
        )
        assert zl.SpotCreateStatus.REJECTED == rejected.status
        assert RoomCreated("refused") == rejected.response
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("room-no", Note("x")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        again = await host.spots.get_or_create("room-no", "lifecycle.Room").submit()
        assert zl.SpotCreateStatus.CREATED == again.status
    assert "on_initialize" == of("room-no")[-2]


@pytest.mark.spec("SPOT-14")
async def test_on_create_raising_is_an_internal_failure_and_leaves_no_spot(store_dsn: str) -> None:
    """An exception from on_create ends the create with INTERNAL_FAILURE naming only its class."""
    async with zl.open_host(app, config(store_dsn)) as host:
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.spots.get_or_create("room-boom", "lifecycle.Room")
                .request(CreateRoom("boom"))
                .submit()
            )
        assert zl.ErrorKind.INTERNAL_FAILURE == caught.value.kind
        assert "RuntimeError" in caught.value.message
        assert "secret detail" not in caught.value.message
        result = await host.spots.get_or_create("room-boom", "lifecycle.Room").submit()
        assert zl.SpotCreateStatus.CREATED == result.status


@pytest.mark.spec("SPOT-7")
async def test_create_deadline_covers_on_create(store_dsn: str) -> None:
    """A create whose on_create outlasts the call's timeout ends with DEADLINE_EXCEEDED and
    leaves the id free."""
    async with zl.open_host(app, config(store_dsn)) as host:
        begun = trio.current_time()
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.spots.get_or_create("room-slow", "lifecycle.Room")
                .request(CreateRoom("slow"))
                .timeout(0.3)
                .submit()
            )
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        assert 0.3 <= trio.current_time() - begun < 5  # at its own timeout, not later
        result = await host.spots.get_or_create("room-slow", "lifecycle.Room").submit()
        assert zl.SpotCreateStatus.CREATED == result.status


@pytest.mark.spec("SPOT-10")
async def test_create_of_a_taken_id_by_another_type_is_a_type_mismatch(store_dsn: str) -> None:
    """get_or_create of an id held by another Spot type ends with TYPE_MISMATCH."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await host.spots.get_or_create("room-t", "lifecycle.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.get_or_create("room-t", "lifecycle.Other").submit()
        assert zl.ErrorKind.TYPE_MISMATCH == caught.value.kind


@pytest.mark.spec("SPOT-32", "SPOT-44", "ID-6.12")
async def test_close_runs_on_closing_once_and_recreation_gets_a_higher_generation(
    store_dsn: str,
) -> None:
    """close(ref) returns True after on_closing(EXPLICIT_CLOSE); creating the id again gives a
    larger generation."""
    async with zl.open_host(app, config(store_dsn)) as host:
        first = await host.spots.get_or_create("room-c", "lifecycle.Room").submit()
        assert await host.spots.close(first.spot_ref) is True
        assert ["init", "on_create", "on_initialize", "on_closing:EXPLICIT_CLOSE"] == of("room-c")
        second = await host.spots.get_or_create("room-c", "lifecycle.Room").submit()
        assert zl.SpotCreateStatus.CREATED == second.status
        assert second.spot_ref.object_generation > first.spot_ref.object_generation


@pytest.mark.spec("SPOT-33", "SPOT-34")
async def test_close_of_a_missing_or_older_incarnation(store_dsn: str) -> None:
    """close returns False for an id with no Spot and raises INVALID_OPERATION for a ref of an
    older generation, leaving the newer incarnation running."""
    async with zl.open_host(app, config(store_dsn)) as host:
        first = await host.spots.get_or_create("room-g", "lifecycle.Room").submit()
        assert await host.spots.close(first.spot_ref) is True
        assert await host.spots.close(first.spot_ref) is False
        second = await host.spots.get_or_create("room-g", "lifecycle.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.close(first.spot_ref)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await host.route.send_to_spot("room-g", Note("still here")).submit()
        assert await host.spots.close(second.spot_ref) is True


@pytest.mark.spec("SPOT-36")
async def test_close_of_an_instance_spot_ref_is_invalid(store_dsn: str) -> None:
    """spots.close applies to User Spots only: an Instance Spot's ref raises INVALID_OPERATION."""
    async with zl.open_host(app, config(store_dsn)) as host:
        read = host.route.request_to_spot("ctr-1", Read(), reply_type=Lines).instance_spot()
        (generation,) = (await read.submit()).lines
        # The ref names the live incarnation: only its kind makes the close invalid.
        ref = zl.SpotRef("ctr-1", int(generation), host.mesh, host.node_rid)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.close(ref)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await host.route.send_to_spot("ctr-1", Note("still here")).submit()


@pytest.mark.spec("SPOT-39")
async def test_messages_admitted_before_close_still_run(store_dsn: str) -> None:
    """Messages admitted before close run on the closing incarnation before on_closing."""
    async with zl.open_host(app, config(store_dsn)) as host:
        result = await host.spots.get_or_create("room-d", "lifecycle.Room").submit()
        for i in range(5):
            await host.route.send_to_spot("room-d", Note(str(i))).submit()
        assert await host.spots.close(result.spot_ref) is True
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("room-d", Note("late")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
    notes = [what for what in of("room-d") if what.startswith("note:")]
    assert ["note:0", "note:1", "note:2", "note:3", "note:4"] == notes
    assert "on_closing:EXPLICIT_CLOSE" == of("room-d")[-1]


@pytest.mark.spec("SPOT-39")
async def test_a_message_sent_while_the_spot_closes_is_not_admitted(store_dsn: str) -> None:
    """Once close has sealed admission, a send to the closing Spot ends NOT_FOUND at once and
    never runs, while the turn admitted before the seal finishes and close returns True."""
    Gated.entered, Gated.release = trio.Event(), trio.Event()
    spot_id = f"room-{uuid.uuid4().hex[:10]}"
    closed: list[bool] = []
    async with zl.open_host(app, config(store_dsn)) as host:
        result = await host.spots.get_or_create(spot_id, "lifecycle.Room").submit()
        await host.route.send_to_spot(spot_id, Note("gated")).submit()
        with trio.fail_after(10):
            await Gated.entered.wait()
            async with trio.open_nursery() as nursery:

                async def close() -> None:
                    closed.append(await host.spots.close(result.spot_ref))

                nursery.start_soon(close)
                await trio.testing.wait_all_tasks_blocked()
                try:
                    with pytest.raises(zl.ZLinkError) as caught:
                        await host.route.send_to_spot(spot_id, Note("after seal")).submit()
                    assert zl.ErrorKind.NOT_FOUND == caught.value.kind
                finally:
                    Gated.release.set()
    assert [True] == closed
    assert ["note:gated"] == [what for what in of(spot_id) if what.startswith("note:")]


@pytest.mark.spec("SPOT-90")
async def test_calls_to_a_spot_still_being_created_wait_for_it(store_dsn: str) -> None:
    """A send and a request to an id whose creation is still in on_create wait (neither ends
    NOT_FOUND) and reach the Spot once it is Ready."""
    Gated.entered, Gated.release = trio.Event(), trio.Event()
    spot_id = f"room-{uuid.uuid4().hex[:10]}"
    outcomes: list[tuple[str, object]] = []
    async with zl.open_host(app, config(store_dsn)) as host:

        async def create() -> None:
            call = host.spots.get_or_create(spot_id, "lifecycle.Room").request(CreateRoom("gated"))
            outcomes.append(("create", (await call.timeout(30).submit()).status))

        async def call(what: str) -> None:
            try:
                if what == "send":
                    await host.route.send_to_spot(spot_id, Note("early")).submit()
                    outcomes.append(("send", "admitted"))
                else:
                    request = host.route.request_to_spot(spot_id, Read(), reply_type=Lines)
                    outcomes.append(("read", type(await request.timeout(30).submit())))
            except zl.ZLinkError as error:
                outcomes.append((what, error.kind))

        async with trio.open_nursery() as nursery:
            try:
                nursery.start_soon(create)
                with trio.fail_after(10):
                    await Gated.entered.wait()
                nursery.start_soon(call, "send")
                nursery.start_soon(call, "read")
                await trio.testing.wait_all_tasks_blocked()
                assert [] == outcomes  # both wait for the creation's outcome
            finally:
                Gated.release.set()
        with trio.fail_after(10):
            while "note:early" not in of(spot_id):
                await trio.testing.wait_all_tasks_blocked()
    assert {
        ("create", zl.SpotCreateStatus.CREATED),
        ("send", "admitted"),
        ("read", Lines),
    } == set(outcomes)
