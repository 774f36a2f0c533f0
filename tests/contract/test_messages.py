"""One semantics for a message, whether its target is on this host or another (specs/messages.md
MSG-1..MSG-7): the message limit, the field type checks and a value of the handler's own.

Every test runs the same calls against a Spot on the caller's own host and one on another host
of the mesh (two hosts in this process, real ZeroMQ on 127.0.0.1, the real store); the MSG-6
test runs two hosts whose limits differ.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
LIMIT = 4096
seen: list[object] = []
kept: list[object] = []


@app.message("messages.Note")
@attrs.frozen
class Note:
    n: int
    text: str


@app.message("messages.Bag")
@attrs.define
class Bag:
    items: list[int]


@app.message("messages.Ask")
@attrs.frozen
class Ask:
    size: int


@app.message("messages.Answer")
@attrs.define
class Answer:
    text: str
    items: list[int]


@app.message("messages.Post")
@attrs.define
class Post:
    """A request whose message is its size: mutable, so it is always encoded to be screened."""

    text: str


@app.message("messages.Odd")
@attrs.frozen
class Odd:
    """Asks for a reply that cannot travel."""


@app.user_spot("messages.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        seen.append(msg)

    @zl.packet_handler(Bag)
    async def bag(self, msg: Bag) -> None:
        seen.append(list(msg.items))
        msg.items.append(99)  # the handler's own copy: the sender must not see this

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        answer = Answer("a" * req.size, [1, 2])
        kept.append(answer)
        return answer

    @zl.request_handler(Post)
    async def post(self, req: Post) -> Answer:
        return Answer(str(len(req.text)), [])

    @zl.request_handler(Odd)
    async def odd(self, req: Odd) -> Answer:
        return Answer(5, [1])  # type: ignore[arg-type]  # its declared class, a field that cannot travel


@asynccontextmanager
async def two_hosts(store_dsn: str) -> AsyncIterator[tuple[zl.Host, list[str]]]:
    """A caller host and, for each of its two Spots, where it lives: ``ids[0]`` on the caller's
    own host, ``ids[1]`` on the other host."""
    seen.clear()
    kept.clear()
    mesh = f"msg-{uuid.uuid4().hex[:8]}"
    config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, max_message_bytes=LIMIT)
    ids = [f"here-{uuid.uuid4().hex[:6]}", f"there-{uuid.uuid4().hex[:6]}"]
    async with zl.open_host(app, config) as caller, zl.open_host(app, config) as other:
        await caller.spots.get_or_create(ids[0], "messages.Room").submit()
        await other.spots.get_or_create(ids[1], "messages.Room").submit()
        yield caller, ids


async def handled(count: int) -> None:
    """Wait until the Spots' handlers recorded ``count`` messages (they run on the hosts'
    tasks; the event is the list growing)."""
    while len(seen) < count:  # noqa: ASYNC110  # handled on the hosts' own tasks
        await trio.sleep(0.005)


@pytest.mark.spec("MSG-1", "DEC-33")
async def test_a_message_over_the_limit_is_refused_at_the_sender_local_or_remote(
    store_dsn: str,
) -> None:
    """A send and a request whose payload is over max_message_bytes end PROTOCOL_ERROR at once,
    for a Spot on the caller's host as for one on another host, and nothing reaches them; one
    under the limit goes to both."""
    async with two_hosts(store_dsn) as (caller, ids):
        with trio.fail_after(10):
            for spot_id in ids:
                with pytest.raises(zl.ZLinkError) as send:
                    await caller.route.send_to_spot(spot_id, Note(1, "x" * LIMIT)).submit()
                assert zl.ErrorKind.PROTOCOL_ERROR == send.value.kind
                assert str(LIMIT) in send.value.message
                big = Bag(list(range(LIMIT)))  # ints of 3 bytes: well over the limit
                with pytest.raises(zl.ZLinkError) as request:
                    await (
                        caller.route.request_to_spot(spot_id, big, reply_type=Answer)
                        .timeout(5)
                        .submit()
                    )
                assert zl.ErrorKind.PROTOCOL_ERROR == request.value.kind
            for spot_id in ids:
                await caller.route.send_to_spot(spot_id, Note(2, "y" * (LIMIT - 100))).submit()
            await handled(2)
        assert [2, 2] == [note.n for note in seen]  # type: ignore[attr-defined]


@pytest.mark.spec("MSG-2")
async def test_a_reply_over_the_limit_ends_the_request_protocol_error_local_or_remote(
    store_dsn: str,
) -> None:
    """A handler's reply over the limit: the caller gets PROTOCOL_ERROR, well before its
    timeout, whether the Spot is on its own host or another; a reply under it arrives."""
    async with two_hosts(store_dsn) as (caller, ids):
        for spot_id in ids:
            started = trio.current_time()
            with pytest.raises(zl.ZLinkError) as refused:
                await (
                    caller.route.request_to_spot(spot_id, Ask(LIMIT), reply_type=Answer)
                    .timeout(20)
                    .submit()
                )
            assert zl.ErrorKind.PROTOCOL_ERROR == refused.value.kind
            assert trio.current_time() - started < 10
            reply = caller.route.request_to_spot(spot_id, Ask(10), reply_type=Answer)
            assert "a" * 10 == (await reply.timeout(20).submit()).text


@pytest.mark.spec("MSG-3")
async def test_a_field_of_the_wrong_type_is_refused_at_the_sender_local_or_remote(
    store_dsn: str,
) -> None:
    """A str in an int field, or a list holding a str where ints are declared, raises the
    encoder's TypeError naming the field, before anything reaches the Spot, local or remote."""
    async with two_hosts(store_dsn) as (caller, ids):
        with trio.fail_after(10):
            for spot_id in ids:
                with pytest.raises(TypeError, match=r"\.n"):
                    await caller.route.send_to_spot(spot_id, Note("1", "x")).submit()  # type: ignore[arg-type]
                with pytest.raises(TypeError, match=r"\.items\[1\]"):
                    await (
                        caller.route.request_to_spot(spot_id, Bag([1, "2"]), reply_type=Answer)  # type: ignore[list-item]
                        .timeout(5)
                        .submit()
                    )
                with pytest.raises(ValueError, match=r"\.n"):
                    await caller.route.send_to_spot(spot_id, Note(2**70, "x")).submit()
            for spot_id in ids:
                await caller.route.send_to_spot(spot_id, Note(3, "ok")).submit()
            await handled(2)
        assert [3, 3] == [note.n for note in seen]  # type: ignore[attr-defined]


@pytest.mark.spec("MSG-4")
async def test_the_handler_and_the_caller_each_get_a_value_of_their_own_local_or_remote(
    store_dsn: str,
) -> None:
    """The handler changes the list it got and the sender changes its list after the send:
    neither sees the other's change. A local caller's reply is not the handler's object."""
    async with two_hosts(store_dsn) as (caller, ids):
        with trio.fail_after(10):
            for number, spot_id in enumerate(ids, 1):
                sent = Bag([number])
                await caller.route.send_to_spot(spot_id, sent).submit()
                sent.items.append(-1)  # after the send: the handler must not see it
                await handled(number)
                assert [number, -1] == sent.items  # the handler's append(99) is not here
                assert [number] == seen[-1]
                reply = caller.route.request_to_spot(spot_id, Ask(3), reply_type=Answer)
                answer = await reply.timeout(5).submit()
                answer.items.append(7)
                assert [1, 2] == kept[-1].items  # type: ignore[attr-defined]
                assert answer is not kept[-1]


@pytest.mark.spec("MSG-5", "ERR-5.8")
async def test_a_reply_that_cannot_travel_is_an_internal_failure_local_or_remote(
    store_dsn: str,
) -> None:
    """A handler returning its declared reply class with an int in a str field: INTERNAL_FAILURE
    naming the field for the caller, local or remote (before, a local caller got the object)."""
    async with two_hosts(store_dsn) as (caller, ids):
        for spot_id in ids:
            with pytest.raises(zl.ZLinkError) as failed:
                await (
                    caller.route.request_to_spot(spot_id, Odd(), reply_type=Answer)
                    .timeout(10)
                    .submit()
                )
            assert zl.ErrorKind.INTERNAL_FAILURE == failed.value.kind
            assert ".text" in failed.value.message


@pytest.mark.spec("MSG-7")
async def test_a_send_no_handler_takes_is_not_found_at_the_sender_local_or_remote(
    store_dsn: str,
) -> None:
    """An Ask has a request handler and no packet handler: as a one-way send it ends NOT_FOUND
    at the sender for a Spot on the caller's host and on another (before, the remote one was
    admitted and dropped by its owner)."""
    async with two_hosts(store_dsn) as (caller, ids):
        with trio.fail_after(10):
            for spot_id in ids:
                with pytest.raises(zl.ZLinkError) as refused:
                    await caller.route.send_to_spot(spot_id, Ask(1)).submit()
                assert zl.ErrorKind.NOT_FOUND == refused.value.kind
                assert "messages.Room has no" in refused.value.message


def test_the_message_limit_is_checked_with_the_host_configuration() -> None:
    """max_message_bytes outside 1 KiB..256 MiB, or not an int, is a ConfigurationError."""
    for bad in (1023, 256 * 1024 * 1024 + 1, 4.0, True):
        with pytest.raises(zl.ConfigurationError, match="max_message_bytes"):
            zl.HostConfig(mesh="m", max_message_bytes=bad)  # type: ignore[arg-type]
    assert 4 * 1024 * 1024 == zl.HostConfig(mesh="m").max_message_bytes


SMALL = LIMIT
BIG = 256 * 1024
OVER = 100 * 1024
"""Over SMALL, and over the small host's frame limit too (SMALL plus 64 KiB for the header frame):
sent anyway, its transport would drop it (TRN-27), within BIG."""


@asynccontextmanager
async def mixed_hosts(store_dsn: str) -> AsyncIterator[tuple[zl.Host, zl.Host, str, str]]:
    """A host with a limit of BIG and one with SMALL in one mesh, each with a Spot: ``big``,
    ``small``, the id of the Spot on ``big``, the id of the one on ``small``."""
    seen.clear()
    kept.clear()
    mesh = f"msg-{uuid.uuid4().hex[:8]}"
    on_big, on_small = f"big-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}"
    big_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, max_message_bytes=BIG)
    small_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, max_message_bytes=SMALL)
    async with zl.open_host(app, big_config) as big, zl.open_host(app, small_config) as small:
        await big.spots.get_or_create(on_big, "messages.Room").submit()
        await small.spots.get_or_create(on_small, "messages.Room").submit()
        yield big, small, on_big, on_small


def names_both_limits(error: zl.ZLinkError) -> bool:
    return error.kind is zl.ErrorKind.PROTOCOL_ERROR and {str(SMALL), str(BIG)} <= set(
        error.message.replace("(", " ").split()
    )


@pytest.mark.spec("MSG-6")
async def test_hosts_with_different_limits_refuse_at_the_sender_what_the_other_would_drop(
    store_dsn: str,
) -> None:
    """From the host with the larger limit, a send and a request over the other host's limit
    (within the sender's own) end PROTOCOL_ERROR at once, naming both limits, and nothing
    reaches the Spot; to its own Spot the same send is delivered. A reply over the caller's
    limit ends the caller's request with PROTOCOL_ERROR at once, not at its timeout. Within
    both limits, messages and replies pass both ways. (Before, the send was admitted and
    dropped by the small host's transport, and the requests waited out their timeout.)"""
    async with mixed_hosts(store_dsn) as (big, small, on_big, on_small):
        with trio.fail_after(5):  # every request below has a timeout of 20 s
            text = "x" * OVER
            with pytest.raises(zl.ZLinkError) as note:  # immutable: passes on this host as it is
                await big.route.send_to_spot(on_small, Note(1, text)).submit()
            assert names_both_limits(note.value), note.value
            with pytest.raises(zl.ZLinkError) as bag:  # mutable: encoded when screened
                await big.route.send_to_spot(on_small, Bag([1000] * (OVER // 3))).submit()
            assert names_both_limits(bag.value), bag.value
            request = big.route.request_to_spot(on_small, Post(text), reply_type=Answer)
            with pytest.raises(zl.ZLinkError) as post:
                await request.timeout(20).submit()
            assert names_both_limits(post.value), post.value
            asked = small.route.request_to_spot(on_big, Ask(OVER), reply_type=Answer)
            with pytest.raises(zl.ZLinkError) as reply:  # the owner's reply: within BIG only
                await asked.timeout(20).submit()
            assert zl.ErrorKind.PROTOCOL_ERROR == reply.value.kind
            assert str(SMALL) in reply.value.message
            assert [] == seen
            await big.route.send_to_spot(on_big, Note(2, text)).submit()  # its own limit: BIG
            await handled(1)
            within = "y" * (SMALL - 100)
            await big.route.send_to_spot(on_small, Note(3, within)).submit()
            await small.route.send_to_spot(on_big, Note(4, within)).submit()
            await handled(3)
            sent = big.route.request_to_spot(on_small, Post(within), reply_type=Answer)
            assert str(len(within)) == (await sent.timeout(20).submit()).text
            asked = small.route.request_to_spot(on_big, Ask(SMALL - 100), reply_type=Answer)
            assert "a" * (SMALL - 100) == (await asked.timeout(20).submit()).text
        assert [2, 3, 4] == sorted(note.n for note in seen)  # type: ignore[attr-defined]
