"""A hypothesis stateful model of two hosts of one mesh in one test process: two host objects,
one store, real sockets. Creates on either host, sends and requests to Spots on either host from
either host, closes and host restarts in random order (specs/routing.md, specs/mesh.md,
specs/completion.md).

Each sender is bound to one host (``s0`` sends through host 0, ``s1`` through host 1), so "per
sender FIFO" is a claim about one path: a host's own mailbox, or the transport between two
hosts. A request from a host to a Spot is answered only after every earlier send of that host
to that Spot was handled (both travel the same connection in order and the Spot's mailbox is
FIFO), which the model uses as a flush before it checks that nothing was lost.

The model is a ``zlink_trio.testing.HostStateMachine`` with two hosts (specs/testing.md KIT-6,
KIT-11): each example opens both in a fresh mesh and they meet before the first rule; a restart
is the kit's ``restart_host``; teardown shuts both down.

Reproduce a failure with ``ZLINK_MESH_MODEL_SEED=<seed>``; ``ZLINK_MESH_MODEL_EXAMPLES`` and
``ZLINK_MESH_MODEL_STEPS`` change the run's size.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Mapping
from typing import ClassVar

import attrs
import pytest
import trio
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio.testing import HostStateMachine

EXAMPLES = int(os.environ.get("ZLINK_MESH_MODEL_EXAMPLES", "15"))
STEPS = int(os.environ.get("ZLINK_MESH_MODEL_STEPS", "12"))
WAIT = 30.0
SPOT_IDS = ("a", "b", "c")
SENDERS = ("s0", "s1")

app = zl.Application()


@app.message("meshmodel.Note")
@attrs.frozen
class Note:
    sender: str
    seq: int


@app.message("meshmodel.Ask")
@attrs.frozen
class Ask:
    call: int


@app.message("meshmodel.Answer")
@attrs.frozen
class Answer:
    call: int
    node_rid: str


handled: dict[tuple[str, int], list[tuple[str, int]]] = {}
"""(spot id, generation) -> (sender, seq) in handling order, across both hosts."""
stray: set[tuple[str, int]] = set()
"""(sender, seq) of sends that completed while no incarnation held their id."""


@app.user_spot("meshmodel.Room")
class Room(NoMembers):
    def _key(self) -> tuple[str, int]:
        ref = self.context.ref
        return (ref.spot_id.value, ref.object_generation.value)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        handled.setdefault(self._key(), []).append((msg.sender, msg.seq))

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.call, self.context.ref.node_rid.value)


@attrs.define
class Live:
    ref: zl.SpotRef
    owner: int
    sent: dict[str, list[int]] = attrs.field(factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (self.ref.spot_id.value, self.ref.object_generation.value)

    def check(self, complete_for: set[str]) -> None:
        """Each sender's messages were handled in send order, none twice; for the senders in
        ``complete_for`` all of them. Stray sends (to the id while nothing held it) are left
        out, each handled at most once."""
        got_all = handled.get(self.key, [])
        strays = [entry for entry in got_all if entry in stray]
        assert len(strays) == len(set(strays)), strays
        for sender, seqs in self.sent.items():
            got = [seq for who, seq in got_all if who == sender and (who, seq) not in stray]
            expected = seqs if sender in complete_for else seqs[: len(got)]
            assert got == expected, (self.key, sender, got, seqs)


class TwoHosts(HostStateMachine):
    app = app
    hosts = 2
    host_config: ClassVar[Mapping[str, object]] = {"closing_timeout": 1.0}
    step_timeout = WAIT

    def __init__(self) -> None:
        handled.clear()
        stray.clear()
        super().__init__()
        self.prefix = uuid.uuid4().hex[:6]
        self.live: dict[str, Live] = {}
        self.generations: dict[str, int] = {}
        self.sequence = 0

    # -- plumbing ------------------------------------------------------------------------------

    def _spot(self, spot_id: str) -> str:
        return f"{self.prefix}-{spot_id}"

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _flush(self, live: Live) -> None:
        """A request from each sender's host: answered only after its earlier sends ran."""
        for index in range(2):
            number = self._next()
            call = self.mesh[index].route.request_to_spot(
                live.ref.spot_id, Ask(number), reply_type=Answer
            )
            answer = self.run(call.timeout(10).submit)
            assert Answer(number, self.mesh[live.owner].node_rid.value) == answer

    # -- rules ---------------------------------------------------------------------------------

    @initialize(via=st.integers(0, 1))
    def first_spot(self, via: int) -> None:
        self.get_or_create(SPOT_IDS[0], via)

    @rule(spot_id=st.sampled_from(SPOT_IDS), via=st.integers(0, 1))
    def get_or_create(self, spot_id: str, via: int) -> None:
        host = self.mesh[via]
        result = self.run(host.spots.get_or_create(self._spot(spot_id), "meshmodel.Room").submit)
        live = self.live.get(spot_id)
        if live is not None:
            assert zl.SpotCreateStatus.EXISTING == result.status
            assert live.ref == result.spot_ref
            return
        assert zl.SpotCreateStatus.CREATED == result.status
        generation = result.spot_ref.object_generation.value
        assert generation > self.generations.get(spot_id, 0), "generations only grow"
        self.generations[spot_id] = generation
        owner = [h.node_rid for h in self.mesh.hosts].index(result.spot_ref.node_rid)
        self.live[spot_id] = Live(result.spot_ref, owner)

    @rule(
        spot_id=st.sampled_from(SPOT_IDS), sender=st.sampled_from(SENDERS), count=st.integers(1, 4)
    )
    def send(self, spot_id: str, sender: str, count: int) -> None:
        host = self.mesh[SENDERS.index(sender)]
        live = self.live.get(spot_id)
        for _ in range(count):
            seq = self._next()
            call = host.route.send_to_spot(self._spot(spot_id), Note(sender, seq))
            if live is None:
                # Nothing holds the id. A sender that still has it cached at a host that held it
                # completes at its own transport (CMP-4.3; the owner drops it, ROUTE-7); else
                # NOT_FOUND. A completed one may reach a later incarnation of the id, once.
                kind = None
                try:
                    self.run(call.submit)
                except zl.ZLinkError as error:
                    kind = error.kind
                if kind is None:
                    stray.add((sender, seq))
                else:
                    assert zl.ErrorKind.NOT_FOUND == kind
                continue
            assert self.run(call.submit) is None  # completes at admission, here or remote
            live.sent.setdefault(sender, []).append(seq)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), count=st.integers(1, 5))
    def send_from_both_at_once(self, data: st.DataObject, count: int) -> None:
        """Both senders send to one Spot at the same time, each awaiting its own submits."""
        spot_id = data.draw(st.sampled_from(sorted(self.live)))
        live = self.live[spot_id]
        plan = {sender: [self._next() for _ in range(count)] for sender in SENDERS}

        async def sender(name: str, seqs: list[int]) -> None:
            host = self.mesh[SENDERS.index(name)]
            for seq in seqs:
                await host.route.send_to_spot(self._spot(spot_id), Note(name, seq)).submit()

        async def both() -> None:
            async with trio.open_nursery() as nursery:
                for name, seqs in plan.items():
                    nursery.start_soon(sender, name, seqs)

        self.run(both)
        for name, seqs in plan.items():
            live.sent.setdefault(name, []).extend(seqs)

    @rule(spot_id=st.sampled_from(SPOT_IDS), via=st.integers(0, 1))
    def request(self, spot_id: str, via: int) -> None:
        number = self._next()
        call = self.mesh[via].route.request_to_spot(
            self._spot(spot_id), Ask(number), reply_type=Answer
        )
        live = self.live.get(spot_id)
        if live is None:
            with pytest.raises(zl.ZLinkError) as caught:
                self.run(call.timeout(10).submit)
            assert zl.ErrorKind.NOT_FOUND == caught.value.kind
            return
        answer = self.run(call.timeout(10).submit)
        assert Answer(number, self.mesh[live.owner].node_rid.value) == answer

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        """Flush both senders' paths, then close: nothing sent before was lost."""
        spot_id = data.draw(st.sampled_from(sorted(self.live)))
        live = self.live.pop(spot_id)
        self._flush(live)
        live.check(complete_for=set(SENDERS))
        owner = self.mesh[live.owner]
        assert self.run(owner.spots.close, live.ref) is True

    @rule(index=st.integers(0, 1))
    def restart(self, index: int) -> None:
        """Shut one host down and start it again as a new run: its Spots are gone (calls to
        them end NOT_FOUND), the other host's keep serving, and the two meet again."""
        old = self.mesh[index]
        for spot_id, live in list(self.live.items()):
            if live.owner == index:
                self._flush(live)
                live.check(complete_for=set(SENDERS))
                del self.live[spot_id]
        new = self.restart_host(index)
        assert new.node_generation != old.node_generation
        assert new is self.mesh[index]

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def per_sender_fifo(self) -> None:
        for live in self.live.values():
            live.check(complete_for=set())

    def teardown(self) -> None:
        try:
            for live in self.live.values():
                self._flush(live)
                live.check(complete_for=set(SENDERS))
        finally:
            super().teardown()  # shuts both hosts down


@pytest.mark.spec("ROUTE-1", "ROUTE-2", "MESH-18", "SPOT-89")
def test_random_operations_on_two_hosts_keep_routing_and_order(store_dsn: str) -> None:
    """Random creates, sends, requests, closes and restarts across two hosts."""
    chosen = int(os.environ.get("ZLINK_MESH_MODEL_SEED") or random.randrange(2**32))
    print(f"mesh model seed: {chosen} (rerun with ZLINK_MESH_MODEL_SEED={chosen})")
    TwoHosts.dsn = store_dsn
    run = get_state_machine_test(
        TwoHosts,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    seed(chosen)(run)()
