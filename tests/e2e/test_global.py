"""Global addressing across hosts of one mesh over one store (specs/global.md).

Every test runs a small mesh (``harness.cluster``): host ``a`` in the test process and child
hosts ``b`` and ``c`` in their own processes, all running ``e2e_app``. Each test is bounded:
every command has its own bound in the harness, and the claims about time are checked on the
elapsed time the calling host measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cbor2
import pytest
import trio

from tests.e2e.harness import Answer, Child, Node, cluster, eventually, kind, new_mesh
from zlink_trio._integration.store import EmbeddedPostgres, ScanPage, StoreConfig, open_stores

SLACK = 1.5
"""Scheduling slack on a loaded 2-core machine for "ended within its timeout"."""
LEASE = 2.0
"""The node lease of the tests where a host dies: short, so its records lapse quickly."""
GAVE_UP = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def ok(answer: Answer) -> Answer:
    assert answer["ok"], answer
    return answer


async def request(node: Node, spot: str, timeout: float = 5.0) -> Answer:  # noqa: ASYNC109
    return ok(await node.ask("request", id=spot, timeout=timeout))


async def gives_up_in_time(
    node: Node,
    op: str,
    spot: str,
    timeout: float,  # noqa: ASYNC109  # the command's own budget, passed on
    allowed: frozenset[str] = GAVE_UP,
) -> Answer:
    """``op`` on ``spot`` from ``node`` ends with one of ``allowed`` (UNAVAILABLE or
    DEADLINE_EXCEEDED by default) within ``timeout`` (the host's own measure), and the command
    comes back within it too (never hangs)."""
    with trio.fail_after(timeout + SLACK + 1.0):
        answer = await node.ask(op, id=spot, timeout=timeout)
    assert kind(answer) in allowed, answer
    assert answer["elapsed"] <= timeout + SLACK, answer
    return answer


async def at_once(*calls: tuple[Node, str, dict[str, Any]]) -> list[Answer]:
    """Each ``(node, op, fields)`` command started at the same time; their answers in order."""
    answers: list[Answer] = [{}] * len(calls)

    async def one(index: int, node: Node, op: str, fields: dict[str, Any]) -> None:
        answers[index] = await node.ask(op, **fields)

    async with trio.open_nursery() as nursery:
        for index, (node, op, fields) in enumerate(calls):
            nursery.start_soon(one, index, node, op, fields)
    return answers


@pytest.mark.spec("GLOBAL-1", "GLOBAL-2")
async def test_a_request_reaches_the_spot_on_the_host_that_owns_it(store_dsn: str) -> None:
    """A Spot created from host c lives on one host; a request by its SpotId from every host,
    a included, is handled by that one activation."""
    async with cluster(store_dsn) as hosts:
        for node in hosts.values():  # discovery: every host lists every other one
            assert set(hosts) - {node.rid} == set(ok(await node.ask("peers"))["peers"])
        created = ok(await hosts["c"].ask("get_or_create", id="room-1"))
        assert "CREATED" == created["status"]
        owner = created["node_rid"]
        assert "c" == owner
        replies = [await request(hosts[rid], "room-1") for rid in ("a", "b", "c")]
        assert [owner] * 3 == [reply["node_rid"] for reply in replies]
        assert [created["generation"]] * 3 == [reply["generation"] for reply in replies]
        assert [1, 2, 3] == [reply["handled"] for reply in replies]  # one activation


@pytest.mark.spec("GLOBAL-3")
async def test_get_or_create_raced_from_three_hosts_creates_once(store_dsn: str) -> None:
    """The same id asked for from three hosts at once: one CREATED, two EXISTING, all naming
    the same incarnation, and requests from every host reach that one activation."""
    async with cluster(store_dsn) as hosts:
        for spot in ("race-1", "race-2", "race-3"):
            calls = [(node, "get_or_create", {"id": spot}) for node in hosts.values()]
            answers = [ok(answer) for answer in await at_once(*calls)]
            statuses = sorted(answer["status"] for answer in answers)
            assert ["CREATED", "EXISTING", "EXISTING"] == statuses, answers
            refs = {(answer["node_rid"], answer["generation"]) for answer in answers}
            assert 1 == len(refs), answers
            [(owner, generation)] = refs
            replies = [await request(node, spot) for node in hosts.values()]
            assert {(owner, generation)} == {(r["node_rid"], r["generation"]) for r in replies}
            assert [1, 2, 3] == [reply["handled"] for reply in replies]


@pytest.mark.spec("GLOBAL-4")
async def test_an_instance_spot_activated_cold_handles_its_first_message_first(
    store_dsn: str,
) -> None:
    """Sends 1..N from b to a missing Instance Spot activate it on b and are handled in send
    order, the activating one first; afterwards messages from a and c reach it on b."""
    count = 20
    async with cluster(store_dsn) as hosts:
        a, b, c = hosts["a"], hosts["b"], hosts["c"]
        for seq in range(1, count + 1):
            ok(await b.ask("send_instance", id="counter-1", seq=seq))

        async def all_sent() -> Answer | None:
            # Read on b first: its answer also says the activation is serving, so the reads
            # from other hosts below find it where it lives (a race with a cold activation
            # still in progress is GLOBAL-12).
            answer = ok(await b.ask("instance_order", id="counter-1", timeout=5.0))
            return answer if len(answer["seqs"]) >= count else None

        seen = await eventually(all_sent, 10.0)
        assert ("b", list(range(1, count + 1))) == (seen["node_rid"], seen["seqs"])
        from_c = ok(await c.ask("instance_order", id="counter-1", timeout=5.0))
        assert ("b", seen["seqs"]) == (from_c["node_rid"], from_c["seqs"])
        ok(await a.ask("send_instance", id="counter-1", seq=count + 1))

        async def one_more() -> Answer | None:
            answer = ok(await c.ask("instance_order", id="counter-1", timeout=5.0))
            return answer if len(answer["seqs"]) > count else None

        after = await eventually(one_more, 10.0)
        assert ("b", list(range(1, count + 2))) == (after["node_rid"], after["seqs"])


@pytest.mark.spec("GLOBAL-5", "GLOBAL-6")
async def test_a_killed_owner_fails_requests_in_time_and_its_spot_comes_back_elsewhere(
    store_dsn: str,
) -> None:
    """kill -9 of the owner: requests to its Spot end UNAVAILABLE or DEADLINE_EXCEEDED within
    their timeout; once its lease lapsed, get_or_create from a live host activates the Spot
    there with a higher generation, and requests reach the new activation."""
    async with cluster(store_dsn, lease=LEASE) as hosts:
        a, b, c = hosts["a"], hosts["b"], hosts["c"]
        created = ok(await c.ask("get_or_create", id="room-k"))
        assert "c" == created["node_rid"]
        assert "c" == (await request(a, "room-k"))["node_rid"]  # a has a route to it now
        assert isinstance(c, Child)
        await c.kill()
        # a with its route cached, at once: c's lease (2 s) has not lapsed yet.
        await gives_up_in_time(a, "request", "room-k", timeout=2.0)
        # Then a again and b, which never reached it: by now c's lease may have lapsed and its
        # records been reclaimed (GLOBAL-13), so the Spot may be gone: NOT_FOUND.
        for node in (a, b):
            await gives_up_in_time(
                node, "request", "room-k", timeout=2.0, allowed=GAVE_UP | {"NOT_FOUND"}
            )

        async def c_is_gone() -> bool:
            views = [ok(await node.ask("peers"))["peers"] for node in (a, b)]
            return all("c" not in peers for peers in views)

        await eventually(c_is_gone, LEASE * 3 + 10.0)
        again = ok(await a.ask("get_or_create", id="room-k"))
        assert "CREATED" == again["status"]
        assert "a" == again["node_rid"]
        assert again["generation"] > created["generation"]
        reply = await request(b, "room-k")
        assert ("a", again["generation"], 1) == (
            reply["node_rid"],
            reply["generation"],
            reply["handled"],
        )


@pytest.mark.spec("GLOBAL-13")
async def test_the_records_a_killed_host_left_are_reclaimed(store_dsn: str) -> None:
    """kill -9 of a host: once its lease lapsed, the records of its Spots that nobody took over
    and of its Entry Spot are deleted by a live host, instead of staying "ready" for good."""
    mesh = new_mesh()
    async with cluster(store_dsn, lease=LEASE, mesh=mesh) as hosts:
        c = hosts["c"]
        for spot in ("room-left-1", "room-left-2"):
            assert "c" == ok(await c.ask("get_or_create", id=spot))["node_rid"]
        async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:

            async def held_by_c() -> list[str]:
                page = await stores.location.scan(f"m/{mesh}/spot/", 1000)
                assert isinstance(page, ScanPage)
                return [
                    record.key
                    for record in page.records
                    if "c" == cbor2.loads(record.value)["owner"]
                ]

            assert 3 == len(await held_by_c())  # two rooms and c's Entry Spot
            assert isinstance(c, Child)
            await c.kill()

            async def nothing_left() -> bool:
                return not await held_by_c()

            await eventually(nothing_left, LEASE * 3 + 15.0)


@pytest.mark.spec("GLOBAL-7", "GLOBAL-8", "GLOBAL-9")
async def test_a_store_outage_keeps_cached_routes_and_fails_new_resolves_in_time(
    pg_folder: Path,
) -> None:
    """PostgreSQL stopped while hosts run: a Spot reached before still answers, a never-seen id
    fails UNAVAILABLE or DEADLINE_EXCEEDED within its deadline; PostgreSQL back: new ids
    resolve and are created again, with no host restarted."""
    server = EmbeddedPostgres(pg_folder / "pgdata")
    dsn = await server.start(60)
    try:
        async with cluster(dsn, children=("b",)) as hosts:
            a, b = hosts["a"], hosts["b"]
            created = ok(await b.ask("get_or_create", id="cached"))
            assert "b" == created["node_rid"]
            assert 1 == (await request(a, "cached"))["handled"]
            await server.stop(60)
            for handled in (2, 3, 4):  # traffic keeps flowing on the cached route
                reply = await request(a, "cached", timeout=2.0)
                assert ("b", handled) == (reply["node_rid"], reply["handled"])
            await gives_up_in_time(a, "request", "never-seen", timeout=2.0)
            await gives_up_in_time(a, "get_or_create", "never-created", timeout=2.0)
            await server.start(60)

            async def created_after_restart() -> Answer | None:
                answer = await a.ask("get_or_create", id="after", timeout=2.0)
                return answer if answer["ok"] else None

            after = await eventually(created_after_restart, 30.0)
            assert "CREATED" == after["status"]
            reply = await request(b, "after")
            assert (after["node_rid"], after["generation"]) == (
                reply["node_rid"],
                reply["generation"],
            )
            assert "b" == (await request(a, "cached"))["node_rid"]
    finally:
        with trio.CancelScope(shield=True):
            await server.stop(60)


@pytest.mark.spec("GLOBAL-10")
async def test_an_actor_on_one_host_answers_requests_from_the_others(store_dsn: str) -> None:
    """An Actor created on b answers a request by its ActorId from a and from c."""
    async with cluster(store_dsn) as hosts:
        created = ok(await hosts["b"].ask("create_actor", id="user-1"))
        assert "CREATED" == created["status"]
        assert "b" == created["node_rid"]
        for rid in ("a", "c"):
            answer = ok(await hosts[rid].ask("request_actor", id="user-1", timeout=5.0))
            assert ("b", "user-1") == (answer["node_rid"], answer["actor_id"])


@pytest.mark.spec("GLOBAL-11")
async def test_a_request_handler_sees_the_callers_deadline(store_dsn: str) -> None:
    """A handler on b of a request from a with a 3 s timeout sees a deadline at most 3 s away;
    a one-way send from a to the same Spot is handled with no deadline."""
    timeout = 3.0
    async with cluster(store_dsn, children=("b",)) as hosts:
        a = hosts["a"]
        ok(await hosts["b"].ask("get_or_create", id="room-d"))
        ok(await a.ask("poke", id="room-d"))

        async def poked() -> Answer | None:
            reply = await request(a, "room-d", timeout=timeout)
            return reply if reply["pokes_without_deadline"] else None

        reply = await eventually(poked, 10.0)
        assert "b" == reply["node_rid"]
        assert 1 == reply["pokes_without_deadline"]
        assert reply["has_deadline"]
        assert 0 < reply["remaining"] <= timeout


@pytest.mark.spec("GLOBAL-12")
async def test_a_cold_activation_raced_from_two_hosts_serves_both_senders(store_dsn: str) -> None:
    """A send from b and a request from c, both marked ``.instance_spot()``, race to a missing
    id: one activation serves both — c's request is answered and b's message is handled,
    whichever of the two wins the claim (three rounds, so either may be seen losing)."""
    async with cluster(store_dsn) as hosts:
        a, b, c = hosts["a"], hosts["b"], hosts["c"]
        for round_ in range(3):
            spot = f"cold-{round_}"
            sent, read = await at_once(
                (b, "send_instance", {"id": spot, "seq": 1}),
                (c, "instance_order", {"id": spot, "timeout": 5.0}),
            )
            ok(sent)
            owner = ok(read)["node_rid"]
            assert owner in ("b", "c")
            assert read["seqs"] in ([], [1])

            async def handled(spot: str = spot) -> Answer | None:
                answer = ok(await a.ask("instance_order", id=spot, timeout=5.0))
                return answer if answer["seqs"] else None

            after = await eventually(handled, 5.0)
            assert (owner, [1]) == (after["node_rid"], after["seqs"])
