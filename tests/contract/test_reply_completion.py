"""How a request completes (specs/completion.md CMP-9.7, CMP-12.1, CMP-15.6, CMP-16.1,
CMP-17.11): the answer of a request already started needs no job permit of its owner, a
request whose caller stopped waiting may still run and its late answer is discarded, nothing
the transport accepted is sent again, and submit(), submit_sync() and yield_() end alike."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from tests.contract.test_operation_identity import _requests
from zlink_trio._integration.transport.mesh import LATE_REPLY
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


class Gate:
    entered = trio.Event()
    release = trio.Event()
    sink_entered = trio.Event()
    sink_release = trio.Event()


@pytest.fixture(autouse=True)
def reset() -> None:
    """Fresh events for each test (each runs its own Trio loop)."""
    Gate.entered = trio.Event()
    Gate.release = trio.Event()
    Gate.sink_entered = trio.Event()
    Gate.sink_release = trio.Event()


@app.message("reply.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("reply.Answer")
@attrs.frozen
class Answer:
    text: str


@app.message("reply.Note")
@attrs.frozen
class Note:
    text: str


@app.instance_spot("reply.Echo")
class Echo(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        if req.text == "slow":
            Gate.entered.set()
            await Gate.release.wait()
        return Answer(req.text)


@app.instance_spot("reply.Sink")
class Sink(zl.InstanceSpot):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        if msg.text == "block":
            Gate.sink_entered.set()
            await Gate.sink_release.wait()


@app.message("reply.Via")
@attrs.frozen
class Via:
    case: str


@app.message("reply.Result")
@attrs.frozen
class Result:
    text: str


CASES = ("ok", "missing", "slow")


def case_call(route: Any, case: str, spot: str) -> Any:
    """The request of ``case``: answered, to a Spot that does not exist, or timed out."""
    if case == "missing":
        return route.request_to_spot("nobody", Ask(case), reply_type=Answer)
    call = route.request_to_spot(spot, Ask(case), reply_type=Answer)
    return call.instance_spot("reply.Echo").timeout(0.5)


def result_of(answer: Answer | None, error: zl.ZLinkError | None) -> str:
    """The answer's text or the error's kind."""
    return error.kind.name if error is not None else answer.text if answer is not None else ""


@app.instance_spot("reply.Caller")
class Caller(zl.InstanceSpot):
    context: Any

    @zl.request_handler(Via)
    async def via(self, req: Via) -> Result:
        call = case_call(self.context.route, req.case, "e-yield")
        try:
            return Result(result_of(await call.yield_(), None))
        except zl.ZLinkError as error:
            return Result(result_of(None, error))


def ask(host: TestHost, text: str, timeout: float = 10.0) -> Any:
    """A request from ``host`` to the Echo Spot ``e-1``, ready to submit."""
    call = host.route.request_to_spot("e-1", Ask(text), reply_type=Answer)
    return call.instance_spot("reply.Echo").timeout(timeout)


def note(host: TestHost, text: str) -> Any:
    """A one-way message from ``host`` to the Sink Spot ``s-1``, ready to submit."""
    return host.route.send_to_spot("s-1", Note(text)).instance_spot("reply.Sink")


@pytest.mark.spec("CMP-15.6", "CMP-17.11")
async def test_the_answer_of_a_started_request_needs_no_job_permit(store_dsn: str) -> None:
    """While every job permit of the owner is held by queued messages (a further send there
    waits), the answer of a request whose handler had started still reaches its caller."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, app_job_queue_size=2) as owner,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(caller, owner)
        await ask(owner, "here").submit()  # the Spot lives on the owner
        answers: list[Answer] = []
        answered = trio.Event()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def slow() -> None:
                    answers.append(await ask(caller, "slow").submit())
                    answered.set()

                nursery.start_soon(slow)
                await Gate.entered.wait()  # started: a running turn holds no permit
                nursery.start_soon(note(owner, "block").submit)
                await Gate.sink_entered.wait()
                await note(owner, "queued 1").submit()
                await note(owner, "queued 2").submit()  # both permits are held now
                paused = trio.Event()

                async def third() -> None:
                    await note(owner, "queued 3").submit()
                    paused.set()

                nursery.start_soon(third)
                await trio.testing.wait_all_tasks_blocked()
                assert not paused.is_set()  # the owner's job queue takes nothing more
                Gate.release.set()
                await answered.wait()
                assert [Answer("slow")] == answers
                assert not paused.is_set()
                Gate.sink_release.set()


@pytest.mark.spec("CMP-9.7", "CMP-12.1", "CMP-15.6")
async def test_a_request_whose_caller_stopped_waiting_still_runs_and_is_sent_once(
    store_dsn: str,
) -> None:
    """A caller stops waiting (cancelled) while the owner's handler runs: the handler finishes,
    its answer comes back and is discarded, and the Request was sent once."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as owner,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=owner.mesh) as caller,
    ):
        await meet(caller, owner)
        await ask(owner, "here").submit()  # the Spot lives on the owner
        seen = _requests(owner)
        remote = caller.host._tree.remote
        assert remote is not None
        mesh = remote.mesh
        assert mesh is not None
        waiting = trio.CancelScope()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def slow() -> None:
                    with waiting:
                        await ask(caller, "slow").submit()

                nursery.start_soon(slow)
                await Gate.entered.wait()  # it reached its target
                waiting.cancel()
            assert 0 == mesh.pending_requests  # the caller's correlation is closed
            Gate.release.set()
            await caller.wait_quiet()

        messages = owner.host._node.registry.messages
        assert [Ask("slow")] == [messages.decode(r.message_type, r.payload) for r in seen]
        assert 1 == mesh.drops[LATE_REPLY]  # the answer came and found no waiting request
        assert 1 == mesh.traffic.sent[owner.node_rid]
        assert 0 == mesh.pending_requests


@pytest.mark.spec("CMP-16.1")
async def test_submit_submit_sync_and_yield_end_a_request_alike(store_dsn: str) -> None:
    """The same request (answered, to a missing Spot, timed out) made with submit(), with
    submit_sync() in an application thread and with yield_() in a Spot's turn ends the same."""
    async with open_test_host(app, dsn=store_dsn) as host:
        results: dict[str, list[str]] = {"submit": [], "submit_sync": [], "yield_": []}

        def in_thread(call: Any) -> str:
            try:
                return result_of(call.submit_sync(), None)
            except zl.ZLinkError as error:
                return result_of(None, error)

        with trio.fail_after(30):
            for case in CASES:
                try:
                    answer = await case_call(host.route, case, "e-submit").submit()
                    results["submit"].append(result_of(answer, None))
                except zl.ZLinkError as error:
                    results["submit"].append(result_of(None, error))
                call = case_call(host.route, case, "e-sync")
                results["submit_sync"].append(await trio.to_thread.run_sync(in_thread, call))
                via = host.route.request_to_spot("c-1", Via(case), reply_type=Result)
                result = await via.instance_spot("reply.Caller").submit()
                results["yield_"].append(result.text)
            Gate.release.set()
        expected = ["ok", "NOT_FOUND", "DEADLINE_EXCEEDED"]
        assert {"submit": expected, "submit_sync": expected, "yield_": expected} == results
