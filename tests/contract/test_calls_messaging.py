"""Sends, requests and single-use call objects on one host (specs/completion.md, specs/api.md,
specs/errors.md)."""

from __future__ import annotations

import logging
import uuid

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()


@app.message("calls.Say")
@attrs.frozen
class Say:
    text: str


@app.message("calls.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("calls.Answer")
@attrs.frozen
class Answer:
    text: str


@app.message("calls.Hold")
@attrs.frozen
class Hold:
    pass


@app.message("calls.Unhandled")
@attrs.frozen
class Unhandled:
    pass


class Gates:
    """Events the tests use to hold a handler and to learn that it ran."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.entered = trio.Event()
        self.finished = trio.Event()
        self.seen: list[tuple[str, dict[str, str]]] = []


gates = Gates()


@app.user_spot("calls.Echo")
class Echo(NoMembers):
    @zl.packet_handler(Say)
    async def say(self, msg: Say, ctx: zl.MessageContext) -> None:
        gates.seen.append((msg.text, dict(ctx.metadata)))

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        if req.text == "fail":
            raise KeyError("private detail")
        if req.text == "wrong":
            return Say("not an answer")  # type: ignore[return-value]  # the failure under test
        return Answer(req.text.upper())

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold) -> Answer:
        gates.entered.set()
        await gates.release.wait()
        gates.finished.set()
        return Answer("late")


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


async def started(store_dsn: str, host: zl.Host) -> None:
    await host.spots.get_or_create("echo", "calls.Echo").submit()


@pytest.mark.spec("CMP-2.2", "CMP-4.2", "CMP-4.4", "ERR-4.1", "CMP-17.1", "SPOT-64")
async def test_send_completes_at_admission_and_the_handler_sees_the_metadata(
    store_dsn: str,
) -> None:
    """A one-way submit returns None once admitted; the handler runs later with the metadata."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        returned = await host.route.send_to_spot("echo", Say("hi")).metadata("k", "v").submit()
        assert returned is None
        assert [] == gates.seen  # admitted, not yet handled: the send did not wait for it
        reply = await host.route.request_to_spot("echo", Ask("x"), reply_type=Answer).submit()
        assert Answer("X") == reply
        assert [("hi", {"k": "v"})] == gates.seen


@pytest.mark.spec("CMP-5.9", "ERR-4.2", "ERR-5.3", "SPOT-19")
async def test_sends_and_requests_to_a_missing_spot_or_handler_are_not_found(
    store_dsn: str,
) -> None:
    """No Spot, or no handler for the message, ends the call with NOT_FOUND and creates nothing."""
    async with zl.open_host(app, config(store_dsn)) as host:
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("nobody", Say("x")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot("nobody", Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        await started(store_dsn, host)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("echo", Unhandled()).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("nobody", Say("x")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind


@pytest.mark.spec("ERR-5.9", "ERR-3.4")
async def test_a_raising_request_handler_is_an_internal_failure_naming_the_handler(
    store_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A request handler's exception reaches the caller as INTERNAL_FAILURE naming the
    handler, its Spot, the exception's class and text; the host logs the traceback once; the
    Spot keeps serving."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        with (
            caplog.at_level(logging.ERROR, logger="zlink_trio"),
            pytest.raises(zl.ZLinkError) as caught,
        ):
            await host.route.request_to_spot("echo", Ask("fail"), reply_type=Answer).submit()
        assert zl.ErrorKind.INTERNAL_FAILURE == caught.value.kind
        message = caught.value.message
        assert "request handler ask of Spot echo raised KeyError: 'private detail'" == message
        tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith("zlink_trio")]
        assert 1 == len(tracebacks)
        assert tracebacks[0].exc_info is not None
        assert KeyError is tracebacks[0].exc_info[0]
        assert (
            Answer("OK")
            == await host.route.request_to_spot("echo", Ask("ok"), reply_type=Answer).submit()
        )


@pytest.mark.spec("SPOT-65")
async def test_a_reply_that_is_not_the_declared_class_is_an_internal_failure(
    store_dsn: str,
) -> None:
    """A handler returning something other than its declared reply class fails the request."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot("echo", Ask("wrong"), reply_type=Answer).submit()
        assert zl.ErrorKind.INTERNAL_FAILURE == caught.value.kind


@pytest.mark.spec("ERR-5.6")
async def test_a_reply_of_another_class_than_reply_type_is_a_protocol_error(
    store_dsn: str,
) -> None:
    """A reply that is not an instance of the caller's reply_type ends with PROTOCOL_ERROR."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot("echo", Ask("x"), reply_type=Say).submit()
        assert zl.ErrorKind.PROTOCOL_ERROR == caught.value.kind


@pytest.mark.spec(
    "ERR-5.5", "ERR-9.3", "CMP-9.2", "CMP-9.3", "ERR-5.18", "CMP-17.18", "CMP-14.2", "ERR-5.1"
)
async def test_timeout_wins_and_the_late_reply_is_discarded(store_dsn: str) -> None:
    """A request whose handler outlasts .timeout() ends with DEADLINE_EXCEEDED; the handler runs
    to its end and its late reply produces no second result."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.route.request_to_spot("echo", Hold(), reply_type=Answer).timeout(0.2).submit()
            )
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        gates.release.set()
        with trio.fail_after(10):
            await gates.finished.wait()
        # The Spot is still served, and the next request gets its own reply.
        assert (
            Answer("NEXT")
            == await host.route.request_to_spot("echo", Ask("next"), reply_type=Answer).submit()
        )


@pytest.mark.spec("CMP-9.10", "ERR-5.17")
async def test_caller_cancellation_is_trio_cancelled_not_an_error(store_dsn: str) -> None:
    """A request inside a cancelled Trio scope ends with trio.Cancelled; the reply that comes
    later is discarded and the Spot keeps serving."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        outcome: list[str] = []
        with trio.move_on_after(0.2) as scope:
            try:
                await host.route.request_to_spot("echo", Hold(), reply_type=Answer).submit()
            except trio.Cancelled:
                outcome.append("cancelled")
                raise
        assert scope.cancelled_caught
        assert ["cancelled"] == outcome
        gates.release.set()
        with trio.fail_after(10):
            await gates.finished.wait()
        assert (
            Answer("A")
            == await host.route.request_to_spot("echo", Ask("a"), reply_type=Answer).submit()
        )


@pytest.mark.spec("API-8", "API-9", "API-10", "CMP-5.15", "ERR-3.3", "SPOT-6", "SPOT-17")
async def test_call_objects_are_single_use(store_dsn: str) -> None:
    """Options chain on the same object; a repeated option or second terminal raises
    INVALID_OPERATION and submits nothing more."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        call = host.route.send_to_spot("echo", Say("once"))
        assert call is call.metadata("a", "1").metadata("b", "2")
        with pytest.raises(zl.ZLinkError) as caught:
            call.metadata("a", "again")
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await call.submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await call.submit()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        request = host.route.request_to_spot("echo", Ask("q"), reply_type=Answer).timeout(1)
        with pytest.raises(zl.ZLinkError) as caught:
            request.timeout(2)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        create = host.spots.get_or_create("echo", "calls.Echo").timeout(1).request(Say("r"))
        for repeat in (lambda: create.timeout(1), lambda: create.request(Say("r"))):
            with pytest.raises(zl.ZLinkError) as caught:
                repeat()
            assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            call.instance_spot()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        assert Answer("Q") == await request.submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await request.submit()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await host.route.request_to_spot("echo", Ask("sync"), reply_type=Answer).submit()
        assert ["once"] == [text for text, _ in gates.seen]


@pytest.mark.spec("CMP-9.9", "ERR-3.1", "SPOT-16", "SPOT-18", "API-13")
async def test_bad_arguments_are_refused_at_the_call_site(store_dsn: str) -> None:
    """Bad ids, timeouts, message classes and SpotRefs raise ValueError/TypeError before
    anything is submitted."""
    async with zl.open_host(app, config(store_dsn)) as host:
        ref = zl.SpotRef("echo", 1, host.mesh, host.node_rid)
        with pytest.raises(TypeError):
            host.route.send_to_spot(ref, Say("x"))  # type: ignore[arg-type]  # the misuse under test
        with pytest.raises(ValueError):
            host.route.send_to_spot("", Say("x"))
        with pytest.raises(TypeError):
            host.route.send_to_spot("echo", object())
        with pytest.raises(TypeError):
            host.route.request_to_spot("echo", Ask("x"), reply_type=int)
        call = host.route.request_to_spot("echo", Ask("x"), reply_type=Answer)
        for bad in (0, -1, float("inf"), float("nan"), 2**31):
            with pytest.raises(ValueError):
                call.timeout(bad)
        for wrong in (True, "1", None):
            with pytest.raises(TypeError):
                call.timeout(wrong)  # type: ignore[arg-type]  # the misuse under test
        call.timeout(0.0001)  # below 1 ms rounds up, still valid
        # The limit is on the value rounded up to whole milliseconds.
        request = host.route.request_to_spot
        request("echo", Ask("x"), reply_type=Answer).timeout(2_147_483.647)
        with pytest.raises(ValueError):
            request("echo", Ask("x"), reply_type=Answer).timeout(2_147_483.6471)
    assert 5.0 == config(store_dsn).request_timeout


@pytest.mark.spec("CMP-9.9")
async def test_a_request_without_timeout_gets_the_hosts_request_timeout(store_dsn: str) -> None:
    """A request with no .timeout() ends DEADLINE_EXCEEDED after HostConfig.request_timeout."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn, request_timeout=0.2)) as host:
        await started(store_dsn, host)
        begun = trio.current_time()
        with trio.fail_after(10), pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot("echo", Hold(), reply_type=Answer).submit()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        assert 0.2 <= trio.current_time() - begun < 5.0
        gates.release.set()


@pytest.mark.spec("CMP-5.10", "ID-6.11")
async def test_a_call_naming_another_mesh_is_not_found(store_dsn: str) -> None:
    """in_mesh() naming a mesh this host does not serve ends with NOT_FOUND."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("echo", Say("x")).in_mesh("elsewhere").submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.spots.get_or_create("x", "calls.Echo")
                .in_mesh(host.mesh.value.upper())
                .submit()
            )
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        await host.route.send_to_spot("echo", Say("x")).in_mesh(host.mesh.value).submit()


@pytest.mark.spec("CMP-2.6", "DEC-3")
async def test_submit_sync_inside_a_trio_task_is_invalid_at_once(store_dsn: str) -> None:
    """submit_sync() from a task of a running Trio loop raises INVALID_OPERATION without
    submitting; the same call object can still be submitted."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        call = host.route.send_to_spot("echo", Say("kept"))
        with pytest.raises(zl.ZLinkError) as caught:
            call.submit_sync()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await call.submit()
        await host.route.request_to_spot("echo", Ask("sync"), reply_type=Answer).submit()
        assert ["kept"] == [text for text, _ in gates.seen]


@pytest.mark.spec("CMP-2.6")
async def test_submit_sync_inside_a_cpu_worker_callback_is_invalid_at_once(store_dsn: str) -> None:
    """submit_sync() from a CPU worker callback's thread, a runtime execution context without a
    Trio task, raises INVALID_OPERATION without submitting; the call object stays usable."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        call = host.route.send_to_spot("echo", Say("kept"))

        def callback() -> zl.ErrorKind | None:
            try:
                call.submit_sync()
            except zl.ZLinkError as error:
                return error.kind
            return None

        with trio.fail_after(10):  # a hang guard
            kind = await host.workers.run_cpu_worker(callback).submit()
        assert zl.ErrorKind.INVALID_OPERATION == kind
        await call.submit()
        await host.route.request_to_spot("echo", Ask("sync"), reply_type=Answer).submit()
        assert ["kept"] == [text for text, _ in gates.seen]


@pytest.mark.spec("CMP-2.5", "CMP-4.8", "DEC-3")
async def test_submit_sync_from_an_application_thread_blocks_until_the_reply(
    store_dsn: str,
) -> None:
    """submit_sync() in a plain thread runs the call on the host's loop and returns the reply."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        call = host.route.request_to_spot("echo", Ask("thread"), reply_type=Answer)
        send = host.route.send_to_spot("echo", Say("thread"))
        results: list[object] = []

        def application_thread() -> None:
            send.submit_sync()
            results.append(call.submit_sync())

        with trio.fail_after(10):
            await trio.to_thread.run_sync(application_thread)
        assert [Answer("THREAD")] == results


@pytest.mark.spec("CMP-2.3", "API-11", "ERR-4.4", "CMP-2.1")
async def test_terminals_are_named_for_python_and_an_unawaited_submit_sends_nothing(
    store_dsn: str,
) -> None:
    """Terminals are submit/submit_sync (plus yield_ on requests, creates and worker calls), a
    one-way call has no timeout option, and a submit() coroutine that is never awaited submits
    nothing."""
    global gates
    gates = Gates()
    async with zl.open_host(app, config(store_dsn)) as host:
        await started(store_dsn, host)
        send = host.route.send_to_spot("echo", Say("never"))
        request = host.route.request_to_spot("echo", Ask("x"), reply_type=Answer)
        create = host.spots.create("calls.Echo")
        worker = host.workers.run_cpu_worker(int)
        for call in (send, request, create, worker):
            assert callable(call.submit)
            assert callable(call.submit_sync)
            assert not hasattr(call, "await_")
        assert not hasattr(send, "yield_")
        assert not hasattr(send, "timeout")
        for call in (request, create, worker):
            assert callable(call.yield_)
        pending = send.submit()
        pending.close()  # created, never awaited
        await host.route.send_to_spot("echo", Say("marker")).submit()
        await host.route.request_to_spot("echo", Ask("sync"), reply_type=Answer).submit()
        assert ["marker"] == [text for text, _ in gates.seen]


@pytest.mark.spec("SPOT-87")
async def test_call_objects_expose_only_their_options_and_terminals(store_dsn: str) -> None:
    """The public attributes of call objects are their option and terminal methods: no Trio
    channel, event, task or binding object is reachable without an underscore."""
    async with zl.open_host(app, config(store_dsn)) as host:
        calls = [
            host.route.send_to_spot("echo", Say("x")),
            host.route.request_to_spot("echo", Ask("x"), reply_type=Answer),
            host.spots.create("calls.Echo"),
        ]
        for call in calls:
            public = [name for name in dir(call) if not name.startswith("_")]
            assert all(callable(getattr(call, name)) for name in public), public
            assert {"submit", "submit_sync"} <= set(public)
